"""LayaAdapter + Runner + the frontend's rows and answers against the `laya` package's Agent."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.laya import LayaPrompts, decode_answer, ranked_labels
from sie.frontend.laya_questions import request_questions
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.laya import LayaAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.laya import make_laya, model_yaml_laya, reference_agent

pytest.importorskip("laya")

# The package rounds to 4 decimals (at most 5e-5 off); float32 on CPU adds far less.
ATOL = 1e-4
STATES = [
    "I was charged twice for my order and nobody answers my emails!",
    "hi",
    "The delivery arrived on time, thanks a lot. " * 30,  # past max_len: the state is cut
    "text with a [MASK] token inside",
]
QUESTIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What does the customer want?",
        "criteria": {"refund": "money back", "complaint": None, "praise": "", "other": {"k": [1, 2]}},
    },
    "angry": {"type": "noul", "instructions": "Is the customer angry?"},
    "polite": {
        "type": "noul",
        "instructions": "Is the message polite?",
        "criteria": {"true": "courteous words"},
        "labels": {"false": "rude", "true": "polite"},
    },
    "severity": {
        "type": "score",
        "instructions": "How severe is it?",
        "criteria": ["none", "minor", "major"],
    },
    "two": {"type": "choice", "instructions": {"ask": "which"}, "criteria": ["yes", "no"]},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_laya(tmp_path_factory.mktemp("laya"))


@pytest.fixture(scope="module")
def agent(folder: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference_agent(folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> LayaAdapter:
    config = parse_model_config(model_yaml_laya("tiny/laya", folder))
    loaded = load_adapter(config, folder, "cpu")
    assert isinstance(loaded, LayaAdapter)
    return loaded


def run(
    adapter: LayaAdapter, prompts: LayaPrompts, states: list[str], questions: list[Any]
) -> list[np.ndarray]:
    """Each row's option logits, all rows in one batch (state-major)."""
    config = prompts.config
    encoded = prompts.rows(
        [(s, False) for s in states],
        prompts.prefixes(questions, config.max_len, config.head_max_len),
        config.max_len,
    )
    assert encoded.aux is not None
    pending = []
    for i in range(len(encoded.offsets) - 1):
        span = slice(int(encoded.offsets[i]), int(encoded.offsets[i + 1]))
        pending.append(PendingItem(0, 1, i, encoded.input_ids[span], None, 0.0, 0, aux=encoded.aux[span]))
    lengths = encoded.lengths.tolist()
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    scores = output[ResultKind.TOKEN_SCORES]
    offsets = scores.row_offsets
    assert offsets is not None
    return [scores.values[offsets[i] : offsets[i + 1], 0] for i in range(len(pending))]


def assert_close(ours: Any, theirs: Any, path: str = "") -> None:
    if isinstance(theirs, dict):
        for key, value in theirs.items():
            if key not in ("answer_confidence", "action"):
                assert_close(ours[key], value, f"{path}.{key}")
    elif isinstance(theirs, float):
        assert ours == pytest.approx(theirs, abs=ATOL), path
    else:
        assert ours == theirs, path


@pytest.mark.parametrize("batch", [STATES, STATES[1:2], STATES[2:]])
def test_answers_match_the_package(adapter: LayaAdapter, agent: Any, folder: Path, batch: list[str]) -> None:
    prompts = LayaPrompts(folder)
    questions, _ = request_questions(QUESTIONS, None, None)
    logits = run(adapter, prompts, batch, questions)
    reference = agent.predict_batch(batch, QUESTIONS)
    for i, state in enumerate(reference):
        rows = logits[i * len(questions) : (i + 1) * len(questions)]
        ours = {q.qid: decode_answer(q, row, prompts.config) for q, row in zip(questions, rows, strict=True)}
        assert set(ours) == set(state["answers"])
        for qid, answer in state["answers"].items():
            assert_close(ours[qid], answer, qid)
        assert ours["angry"]["answer"] == (ours["angry"]["noul"] > 0.5)


def test_labels_mode_is_one_choice_question(adapter: LayaAdapter, agent: Any, folder: Path) -> None:
    prompts = LayaPrompts(folder)
    labels = ["billing", " shipping ", "account", "other", "spam", "sales"]  # 6: the choice:6-10 bucket
    questions, caller = request_questions(None, labels, "Which team should handle this?")
    assert caller == labels
    logits = run(adapter, prompts, STATES[:2], questions)
    schema = {
        "label": {
            "type": "choice",
            "instructions": "Which team should handle this?",
            "criteria": [label.strip() for label in labels],
        }
    }
    reference = agent.predict_batch(STATES[:2], schema)
    for row, state in zip(logits, reference, strict=True):
        ranked = ranked_labels(labels, row, prompts.config, 0.0)
        expected = state["answers"]["label"]["probabilities"]
        assert [c["score"] for c in ranked] == sorted((c["score"] for c in ranked), reverse=True)
        for c in ranked:
            assert c["score"] == pytest.approx(expected[c["label"].strip()], abs=ATOL)
