"""GLiREL's frontend half on its own: the words read, the side channel, relation decoding and the
checkpoint settings served or refused (the end-to-end comparison with glirel is in
tests/gpu_proc/test_glirel_adapter.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sie.frontend.glirel import (
    MAX_WORD_CHARS,
    GlirelInputs,
    decode_relations,
    glirel_tokenizer,
    read_pieces,
    subword_budget,
)
from sie.glirel_config import GlirelSettings
from sie.model_config import ModelConfigError
from tests.integration.reference import minilm_dir

CONFIG: dict[str, Any] = {
    "model_name": "microsoft/deberta-v3-large",
    "max_len": 10,
    "label_embed_strategy": "both",
    "span_marker_mode": "markerv1",
}


def inputs(max_len: int = 10, budget: int = 1000) -> GlirelInputs:
    settings = GlirelSettings.from_config({**CONFIG, "max_len": max_len})
    return GlirelInputs(glirel_tokenizer(minilm_dir() / "tokenizer.json"), settings, budget)


def test_the_side_channel_follows_the_real_tokens() -> None:
    glirel = inputs()
    prompt = glirel.prompt(["works at", "born in"])
    text = "Tim Cook met Satya Nadella"
    row = glirel.row(text, prompt, [(0, 8), (13, 26), (4, 8)])
    assert row.spans == [(0, 1), (3, 4), (1, 1)] and row.entities == [0, 1, 2]
    side = row.aux[row.n_tokens :].tolist()
    assert side == [-2, -1, -2, -4, -5, -2, -2]  # two types, then first + 1 and last + 1 negated
    assert (row.ids[row.n_tokens :] == 0).all()
    assert int(row.aux[: row.n_tokens].max()) == len(prompt) + 5


def test_words_past_max_len_and_their_entities_are_not_read() -> None:
    text = " ".join(f"w{i}" for i in range(12))
    row = inputs(max_len=10).row(text, ["[REL]", "a", "[SEP]"], [(0, 2), (text.index("w9"), len(text))])
    assert row.entities == [0]  # the second ends past the words read
    assert int(row.aux[: row.n_tokens].max()) == 3 + 10


def test_subwords_past_the_budget_are_not_read() -> None:
    glirel = inputs(budget=6)
    text = "aa bb cc dd ee ff gg hh"
    prompt = ["[REL]", "a", "[SEP]"]
    whole = glirel.row(text, prompt, [(0, 2)])
    assert int(whole.aux[: whole.n_tokens].max()) == 3 + 6  # one wordpiece a word: 6 words read
    row = glirel.row(text, prompt, [(0, 2), (15, 17), (18, 20)])
    assert row.entities == [0, 1]  # ff is read, gg is not


def test_one_huge_word_is_read_in_pieces() -> None:
    text = "x" * (2 * MAX_WORD_CHARS + 5) + " end"
    assert list(read_pieces(text, 10)) == [
        (0, MAX_WORD_CHARS),
        (MAX_WORD_CHARS, 2 * MAX_WORD_CHARS),
        (2 * MAX_WORD_CHARS, 2 * MAX_WORD_CHARS + 5),
        (2 * MAX_WORD_CHARS + 6, len(text)),
    ]
    assert len(list(read_pieces(text, 2))) == 2


def test_a_word_without_tokens_is_dropped() -> None:
    text = "Tim \u200b Cook"  # the zero-width space is a word of the splitter, and no token
    row = inputs().row(text, ["[REL]", "a", "[SEP]"], [(0, 3), (6, 10)])
    assert row.spans == [(0, 0), (1, 1)]


def test_subword_budget_follows_the_encoder() -> None:
    assert subword_budget(512, {"model_type": "deberta-v2"}) == 2048
    assert subword_budget(2048, {"model_type": "deberta-v2"}) == 4096
    assert subword_budget(512, {"model_type": "bert", "max_position_embeddings": 512}) == 508
    assert subword_budget(4096, {"model_type": "modernbert", "max_position_embeddings": 8192}) == 8192


def table(rows: list[list[float]]) -> np.ndarray:
    """Device rows with logits given as probabilities."""
    out = np.asarray(rows, np.float64)
    out[:, 4:] = np.log(out[:, 4:] / (1 - out[:, 4:]))
    return out.astype(np.float32).reshape(-1)


def test_decoding_follows_glirels_order_and_top_k() -> None:
    rows = table(
        [
            [0, 1, 3, 3, 0.6, 0.9],
            [3, 3, 0, 1, 0.95, 0.2],
            [0, 1, 5, 6, 0.7, 0.7],
        ]
    )
    spans, names = [(0, 1), (3, 3), (5, 6), (0, 1)], [" Tim Cook ", "met", "Satya", "Tim"]
    labels = ["a", "b"]
    every = decode_relations(rows, labels, spans, names, 0.5, 0)
    assert [(r["head"], r["tail"], r["relation"]) for r in every] == [
        ("Tim Cook", "met", "a"),
        ("Tim Cook", "met", "b"),
        ("met", "Tim Cook", "a"),
        ("Tim Cook", "Satya", "a"),
        ("Tim Cook", "Satya", "b"),
    ]
    best = decode_relations(rows, labels, spans, names, 0.5, 1)
    assert [(r["head"], r["tail"], r["relation"], round(r["score"], 4)) for r in best] == [
        ("met", "Tim Cook", "a", 0.95),
        ("Tim Cook", "met", "b", 0.9),
        ("Tim Cook", "Satya", "a", 0.7),  # ties keep their order
    ]
    assert decode_relations(rows, labels, spans, names, 0.95, 0) == []  # strictly above


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"add_entity_markers": True}, "add_entity_markers"),
        ({"subtoken_pooling": "mean"}, "subtoken_pooling"),
        ({"span_marker_mode": "markerv0"}, "span_marker_mode"),
        ({"label_embed_strategy": "sum"}, "label_embed_strategy"),
        ({"rel_mode": "pooled"}, "rel_mode"),
    ],
)
def test_variants_not_served_are_refused(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ModelConfigError, match=fragment):
        GlirelSettings.from_config({**CONFIG, **change})


def test_config_without_max_len_is_refused() -> None:
    with pytest.raises(ModelConfigError, match="max_len"):
        GlirelSettings.from_config({k: v for k, v in CONFIG.items() if k != "max_len"})
