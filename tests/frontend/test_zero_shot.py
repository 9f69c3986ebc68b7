"""NLI zero-shot classification against transformers' zero-shot-classification pipeline.

The sie side runs as the server does: `nli_pairs` -> TextTokenizer.encode_pairs -> the
CrossEncoderAdapter's logits -> `classify`.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.errors import InvalidInput
from sie.frontend.tokenize import TextTokenizer
from sie.frontend.zero_shot import classify, entailment_index, nli_pairs
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.runner import Runner
from sie.model_config import ModelConfigError, parse_model_config
from sie.shm.layout import ResultKind
from tests.tiny_models.cross_encoder import MAX_SEQUENCE_LENGTH, pairs_batch
from tests.tiny_models.nli import make_nli, model_yaml_nli

TEMPLATE = "This example is {}."
TEXTS = [
    "I love my new phone, the camera is great.",
    "The stock market fell sharply today.",
    "Add the flour and stir until smooth.",
]
LABELS = ["technology", "finance", "sports", "cooking"]
ATOL = 1e-4


@pytest.fixture(scope="module")
def nli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_nli(tmp_path_factory.mktemp("nli"))


@pytest.fixture(scope="module")
def pipe(nli: Path) -> Any:
    from transformers import pipeline

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pipeline("zero-shot-classification", model=str(nli), device="cpu")


def sie_logits(folder: Path, premises: list[str], hypotheses: list[str]) -> np.ndarray:
    """Logits of the pairs as the server computes them: frontend tokenizer, adapter, runner."""
    batch = pairs_batch(folder, premises, hypotheses)
    adapter = load_adapter(parse_model_config(model_yaml_nli("tiny/nli", folder)), folder, "cpu")
    values: np.ndarray = Runner(torch.device("cpu")).run(adapter, batch)[ResultKind.SCORES].values
    return values


def assert_same(got: list[dict[str, Any]], want: dict[str, Any]) -> None:
    assert [g["label"] for g in got] == want["labels"]
    np.testing.assert_allclose([g["score"] for g in got], want["scores"], rtol=0, atol=ATOL)


@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("labels", [LABELS, ["technology"]], ids=["four", "one"])
def test_matches_the_pipeline(nli: Path, pipe: Any, multi_label: bool, labels: list[str]) -> None:
    entail, contradiction = entailment_index(nli, None)
    premises, hypotheses = nli_pairs(TEXTS, labels, TEMPLATE)
    logits = sie_logits(nli, premises, hypotheses)
    got = classify(logits, len(labels), labels, entail, contradiction, multi_label)
    want = pipe(TEXTS, candidate_labels=labels, hypothesis_template=TEMPLATE, multi_label=multi_label)
    assert len(got) == len(TEXTS)
    for got_one, want_one in zip(got, want, strict=True):
        assert_same(got_one, want_one)
    if not multi_label and len(labels) > 1:
        assert all(abs(sum(g["score"] for g in one) - 1) < 1e-6 for one in got)


def test_other_template(nli: Path, pipe: Any) -> None:
    template = "The topic is {}"
    premises, hypotheses = nli_pairs(TEXTS[:1], LABELS, template)
    got = classify(sie_logits(nli, premises, hypotheses), len(LABELS), LABELS, 2, 0, multi_label=False)
    assert_same(got[0], pipe(TEXTS[0], candidate_labels=LABELS, hypothesis_template=template))


def test_long_premise_truncated_like_the_pipeline(nli: Path, pipe: Any) -> None:
    # The pipeline truncates only the premise; longest-first does the same while the hypothesis
    # is shorter than half the budget, which a hypothesis template always is in practice.
    premise = "word after word, the premise goes on and on " * 120
    hypothesis = TEMPLATE.format("finance")
    want = pipe.tokenizer([[premise, hypothesis]], truncation="only_first")["input_ids"][0]
    got = TextTokenizer(nli / "tokenizer.json", MAX_SEQUENCE_LENGTH).encode_pairs([premise], [hypothesis])
    assert len(want) == MAX_SEQUENCE_LENGTH
    assert got.input_ids.tolist() == list(want)


def test_pairs_are_item_major() -> None:
    premises, hypotheses = nli_pairs(["a", "b"], ["x", "y", "z"], "is {}")
    assert premises == ["a", "a", "a", "b", "b", "b"]
    assert hypotheses == ["is x", "is y", "is z"] * 2
    assert nli_pairs([], ["x"], "{}") == ([], [])


@pytest.mark.parametrize("template", ["This example is.", "{label}", "{} and {}", "{0}"])
def test_template_needs_one_placeholder(template: str) -> None:
    with pytest.raises(InvalidInput):
        nli_pairs(["a"], ["x"], template)


def test_labels_required() -> None:
    with pytest.raises(InvalidInput, match="at least one label"):
        nli_pairs(["a"], [], TEMPLATE)


def write_config(folder: Path, id2label: dict[int, str] | None) -> Path:
    config: dict[str, Any] = {"architectures": ["BertForSequenceClassification"]}
    if id2label is not None:
        config["id2label"] = {str(i): name for i, name in id2label.items()}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("id2label", "want"),
    [
        ({0: "contradiction", 1: "neutral", 2: "entailment"}, (2, 0)),
        ({0: "ENTAILMENT", 1: "NEUTRAL", 2: "CONTRADICTION"}, (0, 2)),
        ({0: "contradiction", 1: "entailment", 2: "neutral"}, (1, 0)),
        ({0: "entailment", 1: "not_entailment"}, (0, 1)),  # no contradiction name: the pipeline's rule
        ({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}, (2, 0)),  # no names at all: the pipeline's -1 and 0
        (None, (1, 0)),  # no id2label: transformers' two default labels
    ],
)
def test_entailment_index_from_label_names(
    tmp_path: Path, id2label: dict[int, str] | None, want: tuple[int, int]
) -> None:
    assert entailment_index(write_config(tmp_path, id2label), None) == want


def test_entailment_index_agrees_with_the_pipeline(nli: Path, pipe: Any) -> None:
    assert entailment_index(nli, None)[0] == pipe.entailment_id


def test_configured_entailment_label(tmp_path: Path) -> None:
    folder = write_config(tmp_path, {0: "yes", 1: "maybe", 2: "no"})
    assert entailment_index(folder, "YES") == (0, 2)
    assert entailment_index(folder, "1") == (1, 0)
    with pytest.raises(ModelConfigError, match="not a label"):
        entailment_index(folder, "entailment")


def test_classify_orders_ties_by_input_and_survives_large_logits() -> None:
    logits = np.array([[0.0, 0.0, 5.0], [0.0, 0.0, 5.0], [0.0, 0.0, 900.0]], np.float32)
    single = classify(logits, 3, ["a", "b", "c"], 2, 0, multi_label=False)[0]
    assert [s["label"] for s in single] == ["c", "a", "b"]
    assert single[0]["score"] == pytest.approx(1.0) and single[1]["score"] == pytest.approx(0.0)
    multi = classify(logits, 3, ["a", "b", "c"], 2, 0, multi_label=True)[0]
    assert [s["label"] for s in multi] == ["c", "a", "b"]
    assert multi[1]["score"] == pytest.approx(1 / (1 + np.exp(-5.0)))
