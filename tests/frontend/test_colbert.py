"""ColBERT tokenization against a PyLate-style reference, settings resolution, and MaxSim.

The reference below is PyLate's `ColBERT.tokenize` + the masks of `ColBERT.encode` (pylate 1.6.0,
sentence-transformers 5.3) rewritten with the tokenizers library: texts stripped, tokenized with
truncation to `length - 1` (the marker's room), queries padded with [MASK] to that length, the
marker inserted after position 0 with attention 1, attention forced to 1 for expanded queries
when `attend_to_expansion_tokens`; kept vectors are every query token, or real non-skiplist
document tokens.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tokenizers import Tokenizer

from sie.frontend.colbert import (
    ATTEND,
    KEEP,
    ColbertSettings,
    ColbertTokenization,
    colbert_settings,
    maxsim,
)
from sie.frontend.tokenize import TextTokenizer
from sie.model_config import ModelConfigError, RuntimeOptions, parse_model_config
from tests.tiny_models.colbert import model_yaml_colbert, write_pylate_config, write_tokenizer

TEXTS = [
    "Hello, world!",
    "  What is the capital of France?  ",
    "",
    "ColBERT's late-interaction: MaxSim (sum of max) -- über façade; a.b,c;d",
    "short",
    " ".join(f"word{i % 50}, and more." for i in range(400)),  # long: truncated on both sides
    "x" * 3 + " tokens " * 3000,  # over the tokenizer's character budget: cut before tokenizing
]


@pytest.fixture(scope="module")
def plain_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tokenizer(tmp_path_factory.mktemp("colbert_tok"))


@pytest.fixture(scope="module")
def marker_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer holding PyLate's default markers as added tokens, as PyLate saves them."""
    return write_tokenizer(tmp_path_factory.mktemp("colbert_qd"), added_tokens=("[Q] ", "[D] "))


Row = tuple[np.ndarray, np.ndarray, np.ndarray]  # ids, keep, attend


def reference(folder: Path, texts: list[str], settings: ColbertSettings, *, is_query: bool) -> list[Row]:
    """PyLate's ids and (keep, attend) masks per text, padding removed for documents."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    prefix = settings.query_prefix if is_query else settings.document_prefix
    length = settings.query_length if is_query else settings.document_length
    prefix_id = tokenizer.token_to_id(prefix) if prefix else None
    max_length = length - 1 if prefix_id is not None else length
    mask_id = tokenizer.token_to_id("[MASK]")
    tokenizer.enable_truncation(max_length)
    expand = is_query and settings.do_query_expansion
    tokenizer.enable_padding(pad_id=mask_id, pad_token="[MASK]", length=max_length if expand else None)
    encodings = tokenizer.encode_batch([t.strip() for t in texts])
    ids = np.array([e.ids for e in encodings])
    attention = np.array([e.attention_mask for e in encodings])
    if prefix_id is not None:
        ids = np.concatenate([ids[:, :1], np.full((len(ids), 1), prefix_id), ids[:, 1:]], axis=1)
        attention = np.concatenate([attention[:, :1], np.ones((len(ids), 1), int), attention[:, 1:]], axis=1)
    real = attention.astype(bool)
    if is_query and settings.attend_to_expansion_tokens and expand:
        attention[:] = 1
    if is_query:
        keep = np.ones_like(real) if expand else real
    else:
        skip = [tokenizer.token_to_id(w) for w in settings.skiplist_words]
        keep = real & ~np.isin(ids, [i for i in skip if i is not None])
    rows = []
    for i in range(len(texts)):
        present = np.ones_like(real[i]) if expand else real[i]  # drop batch padding
        rows.append((ids[i][present], keep[i][present], attention[i][present].astype(bool)))
    return rows


def assert_matches_reference(folder: Path, settings: ColbertSettings, texts: list[str] = TEXTS) -> None:
    tokenization = ColbertTokenization(TextTokenizer(folder / "tokenizer.json", 512), settings)
    for is_query in (True, False):
        encoded = tokenization.encode(texts, is_query=is_query)
        assert encoded.aux is not None and encoded.aux.dtype == np.int32
        assert encoded.input_ids.dtype == np.int32 and encoded.n_tokens == encoded.offsets[-1]
        expected = reference(folder, texts, settings, is_query=is_query)
        for i, (ids, keep, attend) in enumerate(expected):
            part = slice(encoded.offsets[i], encoded.offsets[i + 1])
            np.testing.assert_array_equal(encoded.input_ids[part], ids, err_msg=f"text {i}, query={is_query}")
            aux = encoded.aux[part]
            np.testing.assert_array_equal(aux & KEEP > 0, keep, err_msg=f"keep, text {i}, query={is_query}")
            np.testing.assert_array_equal(aux & ATTEND > 0, attend, err_msg=f"attend, text {i}")


CASES: dict[str, dict[str, Any]] = {
    "unused_markers": {},
    "attend_expansion": {"attend_to_expansion_tokens": True},
    "short_lengths": {"query_length": 8, "document_length": 12},
    "no_markers": {"query_prefix": "", "document_prefix": ""},
    "custom_skiplist": {"skiplist_words": ["hello", ",", "not-a-token"]},
    "no_expansion": {"do_query_expansion": False, "query_length": 10},
}


@pytest.mark.parametrize("case", CASES)
def test_matches_pylate_reference(plain_folder: Path, case: str) -> None:
    write_pylate_config(plain_folder, **CASES[case])
    settings = colbert_settings(RuntimeOptions(), plain_folder)
    assert settings.query_prefix == CASES[case].get("query_prefix", "[unused0]")
    assert_matches_reference(plain_folder, settings)


def test_default_markers_are_added_tokens(marker_folder: Path) -> None:
    # No PyLate config at all: PyLate's defaults, "[Q] " / "[D] " (added tokens), 32 / 180.
    settings = colbert_settings(RuntimeOptions(), marker_folder)
    assert (settings.query_prefix, settings.document_prefix) == ("[Q] ", "[D] ")
    assert (settings.query_length, settings.document_length) == (32, 180)
    assert_matches_reference(marker_folder, settings)


def test_query_shape_and_bits(plain_folder: Path) -> None:
    write_pylate_config(plain_folder)
    tokenization = ColbertTokenization(
        TextTokenizer(plain_folder / "tokenizer.json", 512), colbert_settings(RuntimeOptions(), plain_folder)
    )
    query = tokenization.encode(["Hello, world!"], is_query=True)
    assert query.aux is not None
    assert query.lengths.tolist() == [32]
    assert query.input_ids[:7].tolist() == [101, 1, 7592, 1010, 2088, 999, 102]  # [CLS] [unused0] ... [SEP]
    assert (query.input_ids[7:] == 103).all()  # [MASK] expansion
    assert query.aux.tolist() == [KEEP | ATTEND] * 7 + [KEEP] * 25
    document = tokenization.encode(["Hello, world!"], is_query=False)
    assert document.aux is not None
    assert document.input_ids.tolist() == [101, 2, 7592, 1010, 2088, 999, 102]
    assert document.aux.tolist() == [3, 3, 3, ATTEND, 3, ATTEND, 3]  # "," and "!" not kept


def test_items_do_not_depend_on_batch_mates(plain_folder: Path) -> None:
    write_pylate_config(plain_folder, document_length=20)
    tokenization = ColbertTokenization(
        TextTokenizer(plain_folder / "tokenizer.json", 512), colbert_settings(RuntimeOptions(), plain_folder)
    )
    for is_query in (True, False):
        batch = tokenization.encode(TEXTS, is_query=is_query)
        assert batch.aux is not None
        for i, text in enumerate(TEXTS):
            single = tokenization.encode([text], is_query=is_query)
            part = slice(batch.offsets[i], batch.offsets[i + 1])
            np.testing.assert_array_equal(batch.input_ids[part], single.input_ids)
            np.testing.assert_array_equal(batch.aux[part], single.aux)


def test_settings_precedence(tmp_path: Path) -> None:
    write_pylate_config(tmp_path, query_prefix="[unused2]", query_length=24, document_length=100)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<mask>"}))
    from_folder = colbert_settings(RuntimeOptions(), tmp_path)
    assert (from_folder.query_prefix, from_folder.query_length, from_folder.document_length) == (
        "[unused2]",
        24,
        100,
    )
    assert from_folder.expansion_token == "<mask>"
    runtime = RuntimeOptions(query_prefix="[Q] ", query_length=16, attend_to_expansion_tokens=True)
    from_yaml = colbert_settings(runtime, tmp_path, max_sequence_length=256)
    assert (from_yaml.query_prefix, from_yaml.query_length, from_yaml.document_length) == ("[Q] ", 16, 256)
    assert from_yaml.attend_to_expansion_tokens and from_yaml.document_prefix == "[unused1]"
    assert colbert_settings(RuntimeOptions(skiplist_words=["x"]), tmp_path).skiplist_words == ("x",)


def test_stanford_checkpoint_settings(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["HF_ColBERT"]}))
    assert colbert_settings(RuntimeOptions(), tmp_path).query_prefix == "[unused0]"  # no metadata: defaults
    meta = {"query_token_id": "[unused3]", "doc_token_id": "[unused4]", "query_maxlen": 64, "doc_maxlen": 300}
    (tmp_path / "artifact.metadata").write_text(json.dumps({**meta, "attend_to_mask_tokens": True}))
    settings = colbert_settings(RuntimeOptions(), tmp_path)
    assert (settings.query_prefix, settings.document_prefix) == ("[unused3]", "[unused4]")
    assert (settings.query_length, settings.document_length, settings.attend_to_expansion_tokens) == (
        64,
        300,
        True,
    )


def test_unknown_marker_is_a_config_error(plain_folder: Path) -> None:
    tokenizer = TextTokenizer(plain_folder / "tokenizer.json", 512)
    with pytest.raises(ModelConfigError, match=r"\[Q\]"):
        ColbertTokenization(tokenizer, ColbertSettings())  # "[Q] " is not in plain BERT's vocabulary
    with pytest.raises(ModelConfigError, match="too short"):
        ColbertTokenization(tokenizer, ColbertSettings(query_prefix="[unused0]", query_length=2))


def test_for_model_reads_the_yaml_and_the_folder(tmp_path: Path) -> None:
    write_pylate_config(write_tokenizer(tmp_path))
    config = parse_model_config(model_yaml_colbert("tiny/colbert", tmp_path))
    tokenization = ColbertTokenization.for_model(TextTokenizer(tmp_path / "tokenizer.json", 512), config)
    assert (
        tokenization.settings.document_prefix == "[unused1]" and tokenization.settings.document_length == 180
    )


def test_maxsim_matches_loops() -> None:
    rng = np.random.default_rng(0)

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=(n, 8)).astype(np.float32)
        rows: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
        return rows

    query = unit(5)
    docs = [unit(3), unit(1), np.zeros((0, 8), np.float32), unit(7), query.copy()]
    got = maxsim(query, docs)
    want = [sum(max(float(q @ d) for d in doc) for q in query) if len(doc) else 0.0 for doc in docs]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert got[4] == pytest.approx(5.0, abs=1e-5) and got.argmax() == 4  # a document equal to the query
    assert maxsim(query, []).shape == (0,)
