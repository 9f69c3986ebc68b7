"""Laya typed decisions end to end: a real server against the `laya` package's Agent.

The model is the tiny random-weight Laya checkpoint of tests.integration.families; the reference
Agent runs the same folder in this process, float32 on CPU.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.families import LAYA
from tests.integration.server import Server
from tests.integration.wire import decode, post

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
ATOL = 1e-4  # the package rounds to 4 decimals
STATES = ["I was charged twice and I want my money back!", "Thanks, all good. " * 40]
QUESTIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What is asked?",
        "criteria": {"refund": "money back", "other": None, "chat": ""},
    },
    "angry": {"type": "noul", "instructions": "Is the user angry?"},
    "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major"]},
}


@pytest.fixture(scope="module")
def reference(families: Families) -> Any:
    from tests.tiny_models.laya import reference_agent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference_agent(families[1][LAYA])


def extract(server: Server, body: dict[str, Any], *, as_json: bool = True) -> httpx.Response:
    return post(server.url, f"/v1/extract/{LAYA}", body, as_json=as_json)


def assert_answer(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for key, value in theirs.items():
        if key in ("answer_confidence", "action"):
            continue
        if isinstance(value, float):
            assert ours[key] == pytest.approx(value, abs=ATOL), key
        elif isinstance(value, dict) and key == "probabilities":
            assert list(ours[key]) == list(value)
            for option, p in value.items():
                assert ours[key][option] == pytest.approx(p, abs=ATOL), option
        else:
            assert ours[key] == value, key


@pytest.mark.parametrize("as_json", [True, False])
def test_typed_answers_match_the_package(families: Families, reference: Any, as_json: bool) -> None:
    server, _ = families
    items = [{"id": f"s{i}", "text": state} for i, state in enumerate(STATES)]
    response = extract(server, {"items": items, "params": {"output_schema": QUESTIONS}}, as_json=as_json)
    assert response.status_code == 200, response.text
    payload = decode(response)
    assert [item["id"] for item in payload["items"]] == ["s0", "s1"]
    want = reference.predict_batch(STATES, QUESTIONS)
    for item, state in zip(payload["items"], want, strict=True):
        assert item["entities"] == [] and item["classifications"] == []
        assert set(item["data"]) == set(QUESTIONS)
        for qid, answer in state["answers"].items():
            assert_answer(item["data"][qid], answer)


STRUCTURED: list[Any] = [
    {"user": "Wo ist meine Bestellung?", "order": 42, "tags": ["late", "ü"]},
    [{"role": "user", "content": "an old turn " * 300}, {"role": "user", "content": "I want a refund"}],
    "a plain string state",
]


@pytest.mark.parametrize("as_json", [True, False])
def test_structured_states_in_metadata_match_the_package(
    families: Families, reference: Any, as_json: bool
) -> None:
    server, _ = families
    items = [{"id": f"m{i}", "metadata": {"state": state}} for i, state in enumerate(STRUCTURED)]
    items.append({"id": "t", "text": STATES[0]})  # a text state beside them
    response = extract(server, {"items": items, "params": {"output_schema": QUESTIONS}}, as_json=as_json)
    assert response.status_code == 200, response.text
    want = reference.predict_batch([*STRUCTURED, STATES[0]], QUESTIONS)
    for item, state in zip(decode(response)["items"], want, strict=True):
        for qid, answer in state["answers"].items():
            assert_answer(item["data"][qid], answer)


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ({"metadata": {"state": 3}}, "metadata.state must be a string, a JSON object or a list"),
        ({"text": "a", "metadata": {"state": "b"}}, "not both"),
        ({"metadata": {"other": 1}}, "Item 0 has no text"),
    ],
)
def test_a_bad_state_is_a_400(families: Families, item: dict[str, Any], fragment: str) -> None:
    server, _ = families
    response = extract(server, {"items": [item], "params": {"output_schema": QUESTIONS}})
    assert response.status_code == 400, response.text
    assert fragment in response.json()["detail"]["message"]


def test_labels_give_classifications(families: Families, reference: Any) -> None:
    server, _ = families
    labels = ["billing", "shipping", "account"]
    body = {"items": [{"text": STATES[0]}], "params": {"labels": labels, "instruction": "Which team?"}}
    response = extract(server, body)
    assert response.status_code == 200, response.text
    got = response.json()["items"][0]["classifications"]
    schema = {"label": {"type": "choice", "instructions": "Which team?", "criteria": labels}}
    want = reference.predict_batch([STATES[0]], schema)[0]["answers"]["label"]["probabilities"]
    assert [c["label"] for c in got] == sorted(want, key=lambda label: -want[label])
    for c in got:
        assert c["score"] == pytest.approx(want[c["label"]], abs=ATOL)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        (None, "output_schema"),
        ({"output_schema": {"q": {"type": "maybe", "instructions": "x"}}}, "unknown type"),
        ({"output_schema": {"q": {"type": "choice", "instructions": "x", "criteria": []}}}, "criteria"),
        ({"output_schema": QUESTIONS, "labels": ["a"]}, "not both"),
        ({"output_schema": QUESTIONS, "options": {"max_len": 100000}}, "max_len"),
        ({"labels": ["a"], "options": {"threshold": 3}}, "threshold"),
    ],
)
def test_bad_requests_are_400(families: Families, params: dict[str, Any] | None, fragment: str) -> None:
    server, _ = families
    body: dict[str, Any] = {"items": [{"text": STATES[0]}]}
    if params is not None:
        body["params"] = params
    response = httpx.post(f"{server.url}/v1/extract/{LAYA}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"], detail


def test_sdk_extract_gives_the_packages_decisions(families: Families, reference: Any) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = families
    action = {
        "op": "extract",
        "model": LAYA,
        "items": {"text": STATES[0]},
        "kwargs": {"output_schema": QUESTIONS},
    }
    [entry] = run_sdk(server.url, [action])
    data = ok(entry)["data"]
    [want] = reference.predict_batch(STATES[:1], QUESTIONS)
    assert set(data) == set(QUESTIONS)
    for qid, answer in want["answers"].items():
        assert_answer(data[qid], answer)
