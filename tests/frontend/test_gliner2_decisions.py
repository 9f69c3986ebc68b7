"""GLiNER2.5-Decide requests to tasks, and logits to answers (sie/frontend/gliner2_decisions.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.gliner2_decisions import answer, parse_decisions, probabilities, ranked


def parse(params: dict[str, Any]) -> Any:
    return parse_decisions(
        params.get("labels"),
        params.get("output_schema"),
        params.get("instruction"),
        params.get("options", {}),
    )


def test_questions_become_tasks_the_model_reads() -> None:
    decisions = parse(
        {
            "output_schema": {
                " pick ": {
                    "type": "choice",
                    "instructions": " Which? ",
                    "criteria": {"a": "first", " b ": 3},
                },
                "flag": {"type": "noul", "instructions": "Holds?", "criteria": {"TRUE": "it does"}},
                "worded": {"type": "noul", "instructions": "", "labels": {"false": "nope", "true": "yep"}},
                "rate": {"type": "score", "instructions": "Rate", "criteria": ["bad", "1", {"x": [1, 2]}]},
            }
        }
    )
    pick, flag, worded, rate = decisions.tasks
    assert decisions.mode == "questions"
    assert (pick.key, pick.name, pick.prompt, pick.labels, pick.keys) == (
        " pick ",
        "pick",
        "Which?",
        ("a", "b"),
        ("a", " b "),
    )
    assert pick.descriptions == ("first", "3")
    assert pick.schema().tokens() == [
        "(",
        "[P]",
        "pick: Which? [DESCRIPTION] a: first [DESCRIPTION] b: 3",
        "(",
        "[L]",
        "a",
        "[L]",
        "b",
        ")",
        ")",
    ]
    assert (flag.labels, flag.keys, flag.descriptions) == (
        ("yes", "no"),
        ("true", "false"),
        ("it does", None),
    )
    assert (worded.labels, worded.prompt) == (("yep", "nope"), None)
    assert worded.schema().tokens()[2] == "worded"
    assert rate.labels == ("0", "1", "2") and rate.descriptions == ("bad", None, '{"x": [1, 2]}')
    assert rate.legend == ("bad", "1", {"x": [1, 2]})


def test_groups_and_labels_take_the_instruction_as_every_tasks_prompt() -> None:
    groups = parse(
        {
            "instruction": "Tag",
            "options": {"label_groups": {"t": ["x", "y"], "u": ["z"]}, "multi_label": True},
        }
    )
    assert groups.mode == "groups" and [t.prompt for t in groups.tasks] == ["Tag", "Tag"]
    assert all(t.multi_label for t in groups.tasks)
    labels = parse({"labels": ["x", "y"], "options": {"classification_task": "topic", "threshold": 0.25}})
    (task,) = labels.tasks
    assert (labels.mode, task.name, task.multi_label, labels.threshold) == ("labels", "topic", False, 0.25)
    assert parse({"labels": ["x"]}).tasks[0].name == "label"


def softmax(z: list[float]) -> list[float]:
    e = [math.exp(v) for v in z]
    return [v / sum(e) for v in e]


def test_single_label_tasks_are_a_softmax_and_multi_label_a_sigmoid_each() -> None:
    single = parse({"labels": ["a", "b", "c"]}).tasks[0]
    multi = parse({"labels": ["a", "b"], "options": {"classification_type": "multi-label"}}).tasks[0]
    np.testing.assert_allclose(probabilities(single, np.array([1.0, -2.0, 0.5])), softmax([1.0, -2.0, 0.5]))
    np.testing.assert_allclose(
        probabilities(multi, np.array([3.0, -40.0])), [1 / (1 + math.exp(-3)), 1 / (1 + math.exp(40))]
    )


def test_answers_take_each_questions_shape() -> None:
    schema = {
        "pick": {"type": "choice", "instructions": "?", "criteria": ["x", "y"]},
        "flag": {"type": "noul", "instructions": "?"},
        "rate": {"type": "score", "instructions": "?", "criteria": ["lo", "mid", "hi"]},
    }
    pick, flag, rate = parse({"output_schema": schema}).tasks
    got = answer(pick, np.array([0.2, 0.8]))
    assert got["choice"] == "y" and got["probabilities"] == {"x": 0.2, "y": 0.8}
    assert got["confidence"] == pytest.approx(1 + (0.2 * math.log(0.2) + 0.8 * math.log(0.8)) / math.log(2))
    assert answer(flag, np.array([0.3, 0.7])) == {
        "type": "noul",
        "noul": 0.3,
        "answer": False,
        "confidence": 0.7,
    }
    scored = answer(rate, np.array([0.2, 0.3, 0.5]))
    assert scored["score"] == pytest.approx(0.3 + 2 * 0.5)
    assert scored["legend"] == {"0": "lo", "1": "mid", "2": "hi"} and list(scored["probabilities"]) == [
        "0",
        "1",
        "2",
    ]
    multi = parse({"labels": ["a", "b", "c"], "options": {"multi_label": True}}).tasks[0]
    assert answer(multi, np.array([0.5, 0.49, 0.9]))["labels"] == ["a", "c"]
    assert answer(multi, np.array([0.5, 0.49, 0.9]), threshold=0.8)["labels"] == ["c"]


def test_ranked_names_group_labels_and_keeps_those_at_the_threshold() -> None:
    groups = parse({"options": {"label_groups": {"g": ["a", "b"], "h": ["c"]}, "threshold": 0.3}})
    found = ranked(groups, [np.array([0.1, 0.9]), np.array([0.3])])
    assert found == [{"label": "g.b", "score": 0.9}, {"label": "h.c", "score": 0.3}]
    plain = parse({"labels": ["a", "b"]})
    assert [c["label"] for c in ranked(plain, [np.array([0.4, 0.6])])] == ["b", "a"]


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        (
            {"output_schema": {f"q{i}": {"type": "noul", "instructions": "?"} for i in range(65)}},
            "at most 64 questions",
        ),
        ({"labels": [f"l{i}" for i in range(65)]}, "at most 64 labels"),
        (
            {"options": {"label_groups": {f"g{i}": [f"l{j}" for j in range(64)] for i in range(17)}}},
            "at most 1024",
        ),
        (
            {
                "output_schema": {
                    "q": {"type": "choice", "instructions": "?", "criteria": [str(i) for i in range(65)]}
                }
            },
            "at most 64 options",
        ),
        ({"labels": ["x" * 257]}, "at most 256 characters"),
        ({"labels": ["a"], "instruction": "y" * 2049}, "at most 2048 characters"),
        (
            {
                "output_schema": {
                    f"q{i}": {"type": "choice", "instructions": "i" * 2000, "criteria": {"a": "d" * 2000}}
                    for i in range(17)
                }
            },
            "total at most",
        ),
        (
            {
                "output_schema": {
                    "a": {"type": "noul", "instructions": "?"},
                    " a": {"type": "noul", "instructions": "?"},
                }
            },
            "must be unique",
        ),
        ({"output_schema": {"q": {"type": "noul", "instructions": "? [SEP_TEXT]"}}}, "structural token"),
        ({"labels": ["a"], "options": {"group_encoding": "separate"}}, "group_encoding"),
        ({"labels": ["a"], "options": {"classification_type": "both"}}, "classification_type"),
        ({"labels": ["a"], "options": {"multi_label": "yes"}}, "multi_label must be a boolean"),
        ({"labels": ["a"], "options": {"threshold": True}}, "threshold"),
        ({"labels": "a"}, "labels must be a list"),
    ],
)
def test_bad_requests_are_refused(params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidInput, match=None) as raised:
        parse(params)
    assert fragment in str(raised.value)
