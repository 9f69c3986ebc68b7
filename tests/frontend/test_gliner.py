"""GLiNER prompts and span decoding against the `gliner` package's own processor and decoder."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.gliner import (
    GlinerPrompts,
    decode,
    load_tokenizer,
    merge_adjacent,
    prompt_words,
    split_words,
    words_mask,
)
from tests.tiny_models.gliner import MAX_LEN, MAX_WIDTH, make_gliner

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
    ["first name", "person", "first name", ""],  # a duplicate and an empty label, as gliner takes them
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner(tmp_path_factory.mktemp("gliner"))


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    return gliner.GLiNER.from_pretrained(str(folder), local_files_only=True)


@pytest.fixture(scope="module")
def prompts(folder: Path) -> GlinerPrompts:
    return GlinerPrompts.from_dir(folder)


def gliner_inputs(model: Any, text: str, labels: list[str]) -> dict[str, Any]:
    """gliner's own collated batch for one text: input_ids, words_mask, text_lengths, tokens."""
    prepared = model.prepare_batch([text], labels)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sentence of length")  # its max_len cut
        batch = model.collate_batch(prepared["input_x"], prepared["entity_types"])
    batch["word_spans"] = list(zip(prepared["start_token_map"][0], prepared["end_token_map"][0], strict=True))
    return batch


def item(encoded: Any, i: int) -> tuple[np.ndarray, np.ndarray]:
    start, end = encoded.offsets[i], encoded.offsets[i + 1]
    return encoded.input_ids[start:end], encoded.aux[start:end]


@pytest.mark.parametrize("labels", LABEL_SETS)
def test_prompt_ids_and_words_mask_match_gliner(
    prompts: GlinerPrompts, reference: Any, labels: list[str]
) -> None:
    encoded, words = prompts.encode(TEXTS, labels)
    assert encoded.token_type_ids is None and encoded.aux is not None and encoded.aux.dtype == np.int32
    for i, text in enumerate(TEXTS):
        want = gliner_inputs(reference, text, labels)
        ids, mask = item(encoded, i)
        np.testing.assert_array_equal(ids, want["input_ids"][0].numpy())
        np.testing.assert_array_equal(mask, want["words_mask"][0].numpy())
        n_words = int(want["text_lengths"][0, 0])
        assert words[i] == want["word_spans"][:n_words]
        assert int(mask.max()) == len(words[i])


def test_long_texts_are_cut_as_gliner_cuts_them(prompts: GlinerPrompts) -> None:
    encoded, words = prompts.encode(TEXTS[-2:], ["person"])
    assert len(words[1]) == MAX_LEN  # gliner's max_len, in words
    assert encoded.lengths[0] > 128  # not cut at tokenizer.json's stored 128


def test_ids_cut_at_model_max_length_keep_only_words_with_tokens(
    prompts: GlinerPrompts, reference: Any
) -> None:
    # Each nonsense word is many word pieces: fewer than MAX_LEN words overflow the 512 tokens.
    text = " ".join(["zqxjkvbwpfm" + "x" * i for i in range(MAX_LEN - 5)])
    encoded, words = prompts.encode([text], ["person"])
    want = gliner_inputs(reference, text, ["person"])
    ids, mask = item(encoded, 0)
    assert len(ids) == 512
    np.testing.assert_array_equal(ids, want["input_ids"][0].numpy())
    np.testing.assert_array_equal(mask, want["words_mask"][0].numpy())
    # gliner still counts the cut words (as zero vectors); the words sent here are the ones with tokens.
    assert len(words[0]) == int(mask.max()) < int(want["text_lengths"][0, 0])


def test_a_word_without_tokens_is_dropped(prompts: GlinerPrompts, reference: Any) -> None:
    text = "Obama \u200b visited Paris"  # BERT's normalizer deletes the zero-width space
    encoded, words = prompts.encode([text], ["person"])
    want = gliner_inputs(reference, text, ["person"])
    np.testing.assert_array_equal(item(encoded, 0)[1], want["words_mask"][0].numpy())
    assert [text[s:e] for s, e in words[0]] == ["Obama", "visited", "Paris"]


def test_text_without_words_sends_the_prompt_alone(prompts: GlinerPrompts) -> None:
    encoded, words = prompts.encode(["", "  \n "], ["person", "date"])
    assert words == [[], []]
    assert encoded.lengths.tolist() == [7, 7]  # [CLS] <<ENT>> person <<ENT>> date <<SEP>> [SEP]
    assert not encoded.aux.any()
    assert decode(np.zeros(0, np.float32), 0, ["person", "date"], [], "", 0.5) == []


def test_labels_holding_a_marker_are_rejected(prompts: GlinerPrompts) -> None:
    with pytest.raises(InvalidInput):
        prompts.encode(["some text"], ["person <<ENT>>"])


def test_labels_that_do_not_fit_are_rejected(prompts: GlinerPrompts) -> None:
    labels = [f"label number {i} with several words" for i in range(100)]
    with pytest.raises(InvalidInput, match="maximum input length"):
        prompts.encode(["some text"], labels)


def test_bos_eos_override_matches_gliner(folder: Path, tmp_path: Path) -> None:
    # gliner switches on transformers' bos/eos post-processor when the tokenizer names those tokens.
    variant = Path(shutil.copytree(folder, tmp_path / "variant"))
    special = json.loads((variant / "special_tokens_map.json").read_text())
    special.update(bos_token="[unused0]", eos_token="[unused1]")
    (variant / "special_tokens_map.json").write_text(json.dumps(special))
    model = gliner.GLiNER.from_pretrained(str(variant), local_files_only=True)
    encoded, _ = GlinerPrompts.from_dir(variant).encode([TEXTS[0]], ["person"])
    want = gliner_inputs(model, TEXTS[0], ["person"])["input_ids"][0].numpy()
    assert want[0] == 1 and want[-1] == 2  # [unused0] ... [unused1]
    np.testing.assert_array_equal(item(encoded, 0)[0], want)


def test_unsupported_variants_are_refused(folder: Path, tmp_path: Path) -> None:
    variant = Path(shutil.copytree(folder, tmp_path / "variant"))
    config = json.loads((variant / "gliner_config.json").read_text())
    (variant / "gliner_config.json").write_text(json.dumps({**config, "span_mode": "token_level"}))
    with pytest.raises(ValueError, match="token_level"):
        GlinerPrompts.from_dir(variant)


@pytest.mark.parametrize("pooling", ["first", "last", "mean", "max"])
def test_words_mask_follows_gliner_for_each_pooling(folder: Path, pooling: str) -> None:
    from gliner.data_processing.utils import prepare_word_mask

    prompt = prompt_words(["person", "date"], "<<ENT>>", "<<SEP>>")
    text = TEXTS[1]
    encoding = load_tokenizer(folder).encode(
        prompt + [text[s:e] for s, e in _words(text)], is_pretokenized=True
    )

    class Tokenized:  # the one method prepare_word_mask calls on transformers' BatchEncoding
        def word_ids(self, i: int) -> list[int | None]:
            return encoding.word_ids

    want = prepare_word_mask([[]], Tokenized(), skip_first_words=[len(prompt)], subtoken_pooling=pooling)
    mask, _ = words_mask(encoding.word_ids, len(prompt), pooling)
    assert mask.tolist() == want[0]
    assert (
        (mask > 0).sum() > len(_words(text))
        if pooling in ("mean", "max")
        else mask.max() == len(_words(text))
    )


def _words(text: str) -> list[tuple[int, int]]:
    return split_words(text, MAX_LEN)


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8])
@pytest.mark.parametrize("flat_ner", [True, False])
@pytest.mark.parametrize("multi_label", [False, True])
def test_decode_matches_gliner_decoder(threshold: float, flat_ner: bool, multi_label: bool) -> None:
    import torch
    from gliner.decoding.decoder import SpanDecoder

    text = TEXTS[0]
    words = _words(text)
    labels = ["person", "location", "date"]
    rng = np.random.default_rng(7)
    logits = rng.normal(-0.5, 2.0, (len(words), MAX_WIDTH, len(labels))).astype(np.float32)
    spans = SpanDecoder(None).decode(
        [[text[s:e] for s, e in words]],
        {i + 1: label for i, label in enumerate(labels)},
        torch.from_numpy(logits)[None],
        flat_ner=flat_ner,
        threshold=threshold,
        multi_label=multi_label,
    )[0]
    got = decode(logits.reshape(-1), len(words), labels, words, text, threshold, flat_ner, multi_label)
    want = [(words[s.start][0], words[s.end][1], s.entity_type) for s in spans]
    assert [(e["start"], e["end"], e["label"]) for e in got] == want
    np.testing.assert_allclose([e["score"] for e in got], [s.score for s in spans], atol=1e-6)
    assert all(e["text"] == text[e["start"] : e["end"]] and e["bbox"] is None for e in got)
    assert len(got) >= 3


def test_decode_dedupes_labels_as_encode_does(prompts: GlinerPrompts) -> None:
    labels = ["person", "date", "person"]
    words = _words("Angela Merkel")
    logits = np.full((2, MAX_WIDTH, 2), -5.0, np.float32)
    logits[0, 1, 1] = 3.0  # "Angela Merkel" as the second unique label
    (entity,) = decode(logits.reshape(-1), 2, labels, words, "Angela Merkel", 0.5)
    assert (entity["text"], entity["label"], entity["start"], entity["end"]) == (
        "Angela Merkel",
        "date",
        0,
        13,
    )
    assert list(entity) == ["text", "label", "score", "start", "end", "bbox"]


def test_decode_takes_extreme_logits() -> None:
    logits = np.array([1000.0, -1000.0, 1000.0, -1000.0], np.float32)  # one word, max_width 4
    (entity,) = decode(logits, 1, ["person"], [(0, 5)], "Obama", 0.5)
    assert (entity["text"], entity["score"]) == ("Obama", 1.0)


def test_merge_adjacent_joins_one_label_across_at_most_one_character() -> None:
    # SIE's merge_adjacent_entities, for token-level models that tag each word alone.
    text = "Steve Jobs met  Tim at Apple"
    found = [
        {"text": "Jobs", "label": "person", "score": 0.7, "start": 6, "end": 10},
        {"text": "Steve", "label": "person", "score": 0.9, "start": 0, "end": 5},
        {"text": "Tim", "label": "person", "score": 0.8, "start": 16, "end": 19},
        {"text": "Apple", "label": "org", "score": 0.6, "start": 23, "end": 28},
    ]
    assert merge_adjacent(found, text) == [
        {"text": "Steve Jobs", "label": "person", "score": 0.9, "start": 0, "end": 10},
        {"text": "Tim", "label": "person", "score": 0.8, "start": 16, "end": 19},  # "met" lies between
        {"text": "Apple", "label": "org", "score": 0.6, "start": 23, "end": 28},
    ]
    touching = [
        {"text": "New", "label": "city", "score": 0.5, "start": 0, "end": 3},
        {"text": "York", "label": "state", "score": 0.5, "start": 4, "end": 8},
    ]
    assert merge_adjacent(touching, "New York") == touching  # labels differ
