"""GLiNER bi-encoder inputs (text ids, words_mask, label ids) against the `gliner` package's processor."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.frontend.gliner_bi import LABELS_TOKENIZER_DIR, GlinerBiInputs
from sie.model_config import ModelConfigError, parse_model_config
from tests.tiny_models.gliner_bi import LABELS_ENCODER_ID, MAX_LEN, make_gliner_bi, model_yaml_gliner_bi

gliner = pytest.importorskip("gliner")

TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "Hi",
    "state-of-the-art well_known e-mail:  tabs\tand\nnew lines   ",
    "antidisestablishmentarianism " * 30,  # > 128 tokens (tokenizer.json's own cut is not gliner's)
    "word " * 60,  # more than MAX_LEN words: gliner keeps the first MAX_LEN
]
LABEL_SETS = [
    ["person", "location", "organization", "date"],
    ["city"],
    ["first name", "person", "first name"],  # a duplicate, as gliner takes it
    ["a very long label " * 200],  # past the labels tokenizer's 512: cut as gliner cuts it
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner_bi(tmp_path_factory.mktemp("gliner-bi"), arch="bert")


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gliner's "resizing embeddings is not supported" for bi-encoders
        return gliner.GLiNER.from_pretrained(str(folder), local_files_only=True)


@pytest.fixture(scope="module")
def inputs(folder: Path) -> GlinerBiInputs:
    return GlinerBiInputs.from_dir(folder)


def gliner_batch(model: Any, text: str, labels: list[str]) -> dict[str, Any]:
    """gliner's own collated batch for one text: input_ids, words_mask, labels_input_ids, ..."""
    prepared = model.prepare_batch([text], labels)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sentence of length")  # its max_len cut
        batch = model.collate_batch(prepared["input_x"], prepared["entity_types"])
    batch["word_spans"] = list(zip(prepared["start_token_map"][0], prepared["end_token_map"][0], strict=True))
    return batch


def split_item(encoded: Any, i: int) -> tuple[np.ndarray, np.ndarray, list[list[int]]]:
    """Item i's text ids, its words_mask, and each label's ids (read back by their aux marks)."""
    ids = encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]]
    aux = encoded.aux[encoded.offsets[i] : encoded.offsets[i + 1]]
    text = aux >= 0
    assert text[: text.sum()].all()  # the text comes first, the labels after it
    n_labels = int(-aux.min()) if (~text).any() else 0
    return ids[text], aux[text], [ids[aux == -(j + 1)].tolist() for j in range(n_labels)]


@pytest.mark.parametrize("labels", LABEL_SETS)
def test_ids_words_mask_and_label_ids_match_gliner(
    inputs: GlinerBiInputs, reference: Any, labels: list[str]
) -> None:
    encoded, words = inputs.encode(TEXTS, labels)
    assert encoded.token_type_ids is None and encoded.aux is not None and encoded.aux.dtype == np.int32
    for i, text in enumerate(TEXTS):
        want = gliner_batch(reference, text, labels)
        ids, mask, label_ids = split_item(encoded, i)
        np.testing.assert_array_equal(ids, want["input_ids"][0].numpy())
        np.testing.assert_array_equal(mask, want["words_mask"][0].numpy())
        want_labels = [
            row[row_mask.bool()].tolist()
            for row, row_mask in zip(want["labels_input_ids"], want["labels_attention_mask"], strict=True)
        ]
        assert label_ids == want_labels
        n_words = int(want["text_lengths"][0, 0])
        assert words[i] == want["word_spans"][:n_words]
        assert int(mask.max(initial=0)) == len(words[i])


def test_only_text_tokens_are_metered(inputs: GlinerBiInputs) -> None:
    encoded, _ = inputs.encode(["Paris is nice.", "Hi"], ["person", "city"])
    text_tokens = int((encoded.aux >= 0).sum())
    assert encoded.n_tokens == text_tokens < len(encoded.input_ids)


def test_long_texts_are_cut_as_gliner_cuts_them(inputs: GlinerBiInputs) -> None:
    encoded, words = inputs.encode(TEXTS[-2:], ["person"])
    assert len(words[1]) == MAX_LEN  # gliner's max_len, in words
    assert int((encoded.aux[: encoded.offsets[1]] >= 0).sum()) > 128  # not tokenizer.json's stored 128


def test_a_profiles_loadtime_max_len_overrides_gliners(folder: Path) -> None:
    raw = {k: v for k, v in model_yaml_gliner_bi("tiny/bi", folder).items() if k != "adapter"}
    profile = {"adapter": "gliner_bi", "adapter_options": {"loadtime": {"max_len": 7}}}
    config = parse_model_config({**raw, "profiles": {"default": profile, "plain": {"adapter": "gliner_bi"}}})
    _, words = GlinerBiInputs.for_model(config).encode([TEXTS[-1]], ["person"])
    assert len(words[0]) == 7
    _, words = GlinerBiInputs.for_model(config, "plain").encode([TEXTS[-1]], ["person"])
    assert len(words[0]) == MAX_LEN


def test_text_without_words_sends_special_tokens_and_labels(inputs: GlinerBiInputs) -> None:
    encoded, words = inputs.encode(["", "  \n "], ["person", "date"])
    assert words == [[], []]
    ids, mask, label_ids = split_item(encoded, 0)
    assert len(ids) == 2 and not mask.any() and len(label_ids) == 2  # [CLS] [SEP], then both labels


def test_labels_tokenizer_comes_from_the_cached_labels_encoder(
    folder: Path, inputs: GlinerBiInputs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Published checkpoints hold no labels_tokenizer/: the labels encoder's repository is a
    # tokenizer dependency (SIE's hf_tokenizer_dependencies), read from the Hugging Face cache.
    bare = Path(shutil.copytree(folder, tmp_path / "bare"))
    shutil.rmtree(bare / LABELS_TOKENIZER_DIR)
    cache, revision = tmp_path / "hub", "a" * 40
    repo = cache / f"models--{LABELS_ENCODER_ID.replace('/', '--')}"
    shutil.copytree(folder / LABELS_TOKENIZER_DIR, repo / "snapshots" / revision)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from_cache = GlinerBiInputs.from_dir(bare, {LABELS_ENCODER_ID: revision})
    got, _ = from_cache.encode(TEXTS[:2], LABEL_SETS[0])
    want, _ = inputs.encode(TEXTS[:2], LABEL_SETS[0])
    np.testing.assert_array_equal(got.input_ids, want.input_ids)
    with pytest.raises(ModelConfigError, match=LABELS_ENCODER_ID):
        GlinerBiInputs.from_dir(bare, {LABELS_ENCODER_ID: "b" * 40})


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"labels_encoder": None}, "no labels_encoder"),
        ({"span_mode": "token_level"}, "token_level"),
        ({"labels_decoder": "some/decoder"}, "labels_decoder"),
        ({"words_splitter_type": "spacy"}, "spacy"),
    ],
)
def test_other_variants_are_refused(
    folder: Path, tmp_path: Path, change: dict[str, Any], fragment: str
) -> None:
    variant = Path(shutil.copytree(folder, tmp_path / "variant"))
    config = json.loads((variant / "gliner_config.json").read_text())
    (variant / "gliner_config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ValueError, match=fragment):
        GlinerBiInputs.from_dir(variant)


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), float("inf"), 10**400, True, "0.5"])
def test_a_threshold_outside_0_to_1_is_a_400(value: object) -> None:
    from sie.errors import InvalidInput
    from sie.frontend.tasks.extract_gliner_bi import checked_threshold

    with pytest.raises(InvalidInput, match="threshold"):
        checked_threshold(value)
    assert checked_threshold(1) == 1.0
