"""Laya's frontend half against the `laya` package: the rows it builds (token ids and marker
positions, from tokenizer.json) and the answers it decodes from option logits; bad requests."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.laya import LayaPrompts, decode_answer, serialize_state
from sie.frontend.laya_questions import budget_options, request_questions
from sie.frontend.wire import Item
from tests.tiny_models.laya import HEAD_MAX_LEN, MAX_LEN, make_laya, reference_agent

pytest.importorskip("laya")

STATES: list[Any] = [
    "My card was charged twice. [MASK] Please fix it!",
    {"user": "Wo ist meine Bestellung?", "order": 42, "tags": ["late", "ü"]},
    [{"role": "user", "content": "first turn " * 60}, {"role": "user", "content": "newest turn"}],
    "",
    "a long state, cut before it is tokenized " * 400,  # past max_len x 32 characters
    [{"role": "user", "content": "an old turn " * 800}, {"role": "user", "content": "the newest turn"}],
]
QUESTIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What is asked?",
        "criteria": {"refund": "give [MASK] back", "other": None},
    },
    "many": {
        "type": "choice",
        "instructions": "Pick one " * 40,
        "criteria": [f"option number {i} " * 4 for i in range(9)],
    },
    "angry": {"type": "noul", "instructions": "Angry?", "criteria": {True: "shouting", "false": ""}},
    "level": {"type": "score", "instructions": ["as", "json"], "criteria": ["low", {"desc": "mid"}, 3]},
    "worded": {"type": "noul", "instructions": "Polite?", "labels": {"false": " rude ", "true": "kind"}},
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_laya(tmp_path_factory.mktemp("laya-frontend"))


@pytest.fixture(scope="module")
def agent(folder: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference_agent(folder)


def test_rows_are_the_packages(folder: Path, agent: Any) -> None:
    prompts = LayaPrompts(folder)
    questions, _ = request_questions(QUESTIONS, None, None)
    states = [serialize_state(Item(metadata={"state": s})) for s in STATES]
    encoded = prompts.rows(states, prompts.prefixes(questions, MAX_LEN, HEAD_MAX_LEN), MAX_LEN)
    internal = {qid: agent._to_internal(q) for qid, q in QUESTIONS.items()}
    expected = [item for state in STATES for item in agent._encode_state(state, list(QUESTIONS), internal)]
    assert len(encoded.offsets) - 1 == len(expected)
    assert encoded.aux is not None
    for i, item in enumerate(expected):
        span = slice(int(encoded.offsets[i]), int(encoded.offsets[i + 1]))
        assert encoded.input_ids[span].tolist() == item["ids"]
        assert np.flatnonzero(encoded.aux[span]).tolist() == item["markers"]
        assert set(encoded.aux[span][item["markers"]].tolist()) == {item["qtype"] + 1}


def test_answers_are_the_packages(folder: Path, agent: Any) -> None:
    prompts = LayaPrompts(folder)
    questions, _ = request_questions(QUESTIONS, None, None)
    internal = {qid: agent._to_internal(q) for qid, q in QUESTIONS.items()}
    items = agent._encode_state(STATES[0], list(QUESTIONS), internal)
    rng = np.random.default_rng(0)
    logits = np.zeros((len(items), max(len(it["markers"]) for it in items)), np.float32)
    for j, it in enumerate(items):
        logits[j, : len(it["markers"])] = rng.normal(0.0, 2.0, len(it["markers"]))
    act = np.ones((len(items), 2), np.float32)
    reference = agent._decode_answers(logits, act, items, list(QUESTIONS), internal, 0)
    for j, q in enumerate(questions):
        ours = decode_answer(q, logits[j, : len(items[j]["markers"])], prompts.config)
        theirs = reference[q.qid]
        for key, value in theirs.items():
            if key in ("answer_confidence", "action"):
                continue
            if key == "legend":
                assert ours[key] == value
            elif isinstance(value, dict):
                assert list(ours[key]) == list(value)
                assert np.allclose(list(ours[key].values()), list(value.values()), atol=1e-4)
            elif isinstance(value, float):
                assert ours[key] == pytest.approx(value, abs=1e-4)
            else:
                assert ours[key] == value


@pytest.mark.parametrize(
    ("schema", "labels", "instruction"),
    [
        (None, None, None),  # nothing to answer
        ({}, None, None),
        ({"q": {"type": "choice", "instructions": "x", "criteria": []}}, None, None),
        ({"q": {"type": "pick", "instructions": "x", "criteria": ["a"]}}, None, None),
        ({"q": {"type": "noul"}}, None, None),
        ({"q": {"type": "score", "instructions": "x", "criteria": {"a": 1}}}, None, None),
        ({"q": {"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}}, None, None),
        ({"q": {"type": "noul", "instructions": "x", "labels": {"false": "a", "true": "a"}}}, None, None),
        ({"q": {"type": "choice", "instructions": "x", "criteria": ["a"], "labels": {}}}, None, None),
        ({"q": {"type": "choice", "instructions": "x", "criteria": [1, 2]}}, None, None),
        ({"q": "not a question"}, None, None),
        ({f"q{i}": {"type": "noul", "instructions": "x"} for i in range(65)}, None, None),
        ({"q": {"type": "noul", "instructions": "x"}}, ["a"], None),
        ({"q": {"type": "noul", "instructions": "x"}}, None, "an instruction"),
        (None, ["a", " a"], None),
    ],
)
def test_bad_questions_are_refused(schema: Any, labels: Any, instruction: Any) -> None:
    with pytest.raises(InvalidInput):
        request_questions(schema, labels, instruction)


def test_bad_states_and_budgets_are_refused(folder: Path) -> None:
    for item in (Item(), Item(text="a", metadata={"state": "b"}), Item(metadata={"state": 3})):
        with pytest.raises(InvalidInput):
            serialize_state(item)
    for options in (
        {"max_len": MAX_LEN + 1},
        {"max_len": 0},
        {"head_max_len": "9"},
        {"max_len": 32, "head_max_len": 64},
    ):
        with pytest.raises(InvalidInput):
            budget_options(options, MAX_LEN, HEAD_MAX_LEN)
    prompts = LayaPrompts(folder)
    questions, _ = request_questions(
        {"q": {"type": "choice", "instructions": "x", "criteria": list("abcdefghij")}}, None, None
    )
    with pytest.raises(InvalidInput):  # ten options cannot all be marked in a 12-token row
        prompts.prefixes(questions, 12, 12)
