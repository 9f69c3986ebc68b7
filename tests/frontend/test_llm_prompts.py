"""LLM reranker prompts (sie.frontend.llm_prompts) against SIE's recipe run through transformers'
tokenizer on the same tokenizer files (tests.tiny_models.llm_reranker.sie_rows)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.errors import InputTooLong, InvalidInput
from sie.frontend.llm_prompts import QWEN3_SUFFIX, LlmPrompts
from sie.frontend.tokenize import TextTokenizer
from sie.model_config import RuntimeOptions
from tests.tiny_models.llm_reranker import (
    MAX_SEQUENCE_LENGTH,
    make_llm_reranker,
    sie_rows,
    write_tokenizer,
)

QUERY = "how long do cats sleep"
DOCS = [
    "cats sleep",
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed higher on Friday.",
    "東京 kittens ✓",
    "x",
    "dogs sleep long hours " * 80,  # past the row limit: the document is cut
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tok")
    write_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_llm_reranker(tmp_path_factory.mktemp("native"), native=True)


def prompts_for(folder: Path, input_format: str, **runtime: object) -> LlmPrompts:
    tokenizer = TextTokenizer(folder / "tokenizer.json", MAX_SEQUENCE_LENGTH)
    options = RuntimeOptions(input_format=input_format, **runtime)  # type: ignore[arg-type]
    return LlmPrompts.for_profile(tokenizer, options, folder, MAX_SEQUENCE_LENGTH)


def rows_of(
    prompts: LlmPrompts, documents: list[str], instruction: str | None = None, **kw: int
) -> list[list[int]]:
    encoded = prompts.encode(QUERY, documents, instruction, prompts.limit(kw.get("limit")))
    assert encoded.token_type_ids is None and encoded.input_ids.dtype == np.int32
    return [
        encoded.input_ids[a:b].tolist()
        for a, b in zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True)
    ]


@pytest.mark.parametrize("input_format", ["qwen3", "mxbai"])
@pytest.mark.parametrize("limit", [None, 110, 150])
def test_rows_are_sies_recipe(folder: Path, input_format: str, limit: int | None) -> None:
    got = rows_of(prompts_for(folder, input_format), DOCS, limit=limit)  # type: ignore[arg-type]
    want = sie_rows(folder, input_format, QUERY, DOCS, max_length=limit or MAX_SEQUENCE_LENGTH)
    assert got == want
    assert max(map(len, got)) == (limit or MAX_SEQUENCE_LENGTH)  # the long document was cut to fit


def test_qwen3_instruction_is_the_requests_else_the_profiles(folder: Path) -> None:
    profile = prompts_for(folder, "qwen3", default_instruction="Find the cat facts")
    asked = rows_of(profile, DOCS[:2], "Judge sleep")
    assert asked == sie_rows(folder, "qwen3", QUERY, DOCS[:2], max_length=256, instruction="Judge sleep")
    by_profile = sie_rows(
        folder, "qwen3", QUERY, DOCS[:2], max_length=256, default_instruction="Find the cat facts"
    )
    assert rows_of(profile, DOCS[:2]) == by_profile != asked
    assert rows_of(profile, DOCS[:2], "") == by_profile  # SIE: an empty instruction is no instruction
    assert rows_of(prompts_for(folder, "qwen3"), DOCS[:2]) == sie_rows(
        folder, "qwen3", QUERY, DOCS[:2], max_length=256
    )


def test_the_space_before_the_document_never_merges_into_it(folder: Path) -> None:
    tokenizer = TextTokenizer(folder / "tokenizer.json", MAX_SEQUENCE_LENGTH).raw
    (row,) = rows_of(prompts_for(folder, "qwen3"), ["cats sleep"])
    suffix = tokenizer.encode(QWEN3_SUFFIX, add_special_tokens=False).ids
    alone = tokenizer.encode("cats sleep", add_special_tokens=False).ids
    assert row[len(row) - len(suffix) - len(alone) :] == alone + suffix
    assert tokenizer.id_to_token(row[len(row) - len(suffix) - len(alone) - 1]) == "Ġ"
    # Tokenized whole, the space would have glued onto the word.
    assert "Ġcats" in tokenizer.encode("<Document>: cats sleep", add_special_tokens=False).tokens


def test_a_long_document_is_tokenized_only_as_far_as_needed_and_cut_exactly(folder: Path) -> None:
    long = "cats sleep hours, " * 3000  # 54k characters: more than the tokenizer's character budget
    for input_format in ("qwen3", "mxbai"):
        got = rows_of(prompts_for(folder, input_format), [long, "x"])
        assert got == sie_rows(folder, input_format, QUERY, [long, "x"], max_length=MAX_SEQUENCE_LENGTH)


def test_limits_and_bad_input(folder: Path) -> None:
    prompts = prompts_for(folder, "qwen3")
    assert prompts.ceiling == MAX_SEQUENCE_LENGTH  # the model's positions, below max_sequence_length
    assert prompts.limit(10_000) == MAX_SEQUENCE_LENGTH and prompts.limit(100) == 100
    for bad in (0, -1, "64", True):
        with pytest.raises(InvalidInput, match="max_seq_length"):
            prompts.limit(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="too small for the reranker instruction, query"):
        prompts.encode(QUERY, ["a"], None, 40)
    for query, docs in (("  ", ["a"]), (QUERY, ["a", "\n"])):
        with pytest.raises(InvalidInput, match="non-empty"):
            prompts.encode(query, docs, None, 256)
    assert prompts_for(folder, "qwen3", max_seq_length=100).ceiling == 100


def test_native_rows_are_the_checkpoints_chat_template(native: Path) -> None:
    prompts = prompts_for(native, "native")
    docs = DOCS[:-1]
    assert rows_of(prompts, docs) == sie_rows(native, "native", QUERY, docs, max_length=MAX_SEQUENCE_LENGTH)
    with pytest.raises(InvalidInput, match="not in an instruction"):
        prompts.encode(QUERY, docs, "Judge", 256)
    with pytest.raises(InputTooLong, match="exceeds the 256-token context"):
        prompts.encode(QUERY, ["cats sleep " * 5000], None, 256)  # refused, never cut
    assert rows_of(prompts, ["", " "]) == sie_rows(native, "native", QUERY, ["", " "], max_length=256)
    with pytest.raises(InvalidInput, match="from 1 to 256"):
        prompts.limit(257)
