"""The frontend half of the context pruner: passage spans of a pair encoding, and the ids skipped.

Spans are checked against transformers' tokenizer run on the passage alone (what SIE reads its
offsets from), for short pairs and for pairs over the character budget that are cut before
tokenizing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.frontend.context_pruner import keep_spans, skipped_token_ids
from sie.frontend.tokenize import TextTokenizer
from tests.tiny_models.cross_encoder import CLS, SEP, UNUSED0, write_tokenizer

QUERY = "how long do cats sleep"
DOCS = ["Cats sleep 16 hours, often in naps.", "x", "The quick brown fox jumps over the lazy dog. " * 300]
MAX_LENGTH = 64


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("xlmr-tokenizer")
    write_tokenizer(folder, "xlmr")
    return folder


def test_spans_are_the_passage_tokens_offsets(folder: Path) -> None:
    import transformers

    reference = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer = TextTokenizer(folder / "tokenizer.json", MAX_LENGTH)
    encoded, spans = tokenizer.encode_pairs_with_spans([QUERY] * len(DOCS), DOCS)
    pairs = reference([QUERY] * len(DOCS), DOCS, truncation=True, max_length=MAX_LENGTH)
    for i, doc in enumerate(DOCS):
        ids = encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]]
        assert ids.tolist() == pairs["input_ids"][i]
        n_query = len(reference(QUERY, add_special_tokens=False)["input_ids"])
        start = 1 + n_query + 2  # <s> query </s></s>: RoBERTa's pair layout
        alone = reference(doc, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        passage = spans[i][start:-1]
        assert passage.tolist() == [list(span) for span in alone[: len(passage)]]
        assert not spans[i][:start].any() and not spans[i][-1].any()  # query and specials: (0, 0)
    assert len(encoded.input_ids[encoded.offsets[2] : encoded.offsets[3]]) == MAX_LENGTH  # the long pair, cut


def test_skipped_ids_are_the_padding_separator_and_classifier_tokens(folder: Path) -> None:
    tokenizer = TextTokenizer(folder / "tokenizer.json", MAX_LENGTH)
    assert skipped_token_ids(folder, tokenizer.raw) == {UNUSED0, CLS, SEP}  # [PAD] is id 1 here


def test_runs_join_across_one_character_and_split_on_label_or_gap() -> None:
    text = "ab cd  ef gh"
    spans = np.array([[0, 0], [0, 2], [3, 5], [7, 9], [10, 12], [10, 12]], np.int32)
    ids = np.array([CLS, 5, 6, 7, SEP, 8])
    keep = np.array([0.99, 0.95, 0.92, 0.91, 0.99, 0.3], np.float32)
    found = keep_spans(text, spans, ids, keep, {CLS, SEP}, 0.6, 0.9)
    assert [(e["text"], e["label"], e["start"], e["end"]) for e in found] == [
        ("ab cd", "highlight", 0, 5),  # one space apart: one run
        ("ef", "highlight", 7, 9),  # two spaces apart: a new run
        ("gh", "pruned", 10, 12),  # the separator's id is skipped, whatever its span
    ]
    assert found[0]["score"] == pytest.approx((0.95 + 0.92) / 2)
