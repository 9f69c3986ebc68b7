"""GLiNER2.5-Decide end to end: a real server's typed answers and label scores against gliner2 2.x's
classification scorer on the same tiny random weights (tests.integration.families), span and
boundary checkpoints."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.gpu_proc.test_gliner2_decide import PackageTask, package_schema
from tests.integration.families import GLINER2_DECIDE, GLINER2_DECIDE_BOUNDARY
from tests.integration.server import Server
from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk
from tests.integration.wire import decode, post
from tests.tiny_models.gliner2 import DECIDE_WINDOW

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
ATOL = 1e-4
TEXTS = ["I was charged twice and I want my money back!", "The app is fine, thanks", "login fails"]
QUESTIONS: dict[str, Any] = {
    "intent": {
        "type": "choice",
        "instructions": "What is asked?",
        "criteria": {"refund": "money back", "other": None, "chat": ""},
    },
    "angry": {"type": "noul", "instructions": "Is the user angry?", "criteria": {"true": "shouting"}},
    "severity": {
        "type": "score",
        "instructions": "How severe?",
        "criteria": ["none", "minor", {"level": "major"}],
    },
}
MODELS = [GLINER2_DECIDE, GLINER2_DECIDE_BOUNDARY]


@pytest.fixture(scope="module")
def scorers(families: Families) -> dict[str, Any]:
    gliner2 = pytest.importorskip("gliner2")
    if int(gliner2.__version__.split(".")[0]) < 2:
        pytest.skip("GLiNER2.5-Decide needs gliner2 2.x")
    from gliner2 import AutoExtractor
    from gliner2.classification.scoring import ClassificationScorer

    return {
        model: ClassificationScorer(
            AutoExtractor.from_pretrained(str(families[1][model]), map_location="cpu").eval()
        )
        for model in MODELS
    }


def package_logits(scorer: Any, tasks: list[PackageTask], texts: list[str]) -> Any:
    """gliner2's logits per text: {task: {label: logit}}."""
    return [dict(s.tasks) for s in scorer.batch_score(texts, package_schema(tasks), batch_size=len(texts))]


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    e = [math.exp(z - top) for z in logits]
    return [v / sum(e) for v in e]


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


def entropy_confidence(p: list[float]) -> float:
    return 1.0 - (-sum(v * math.log(v) for v in p if v > 0)) / math.log(len(p))


def extract(
    server: Server, model: str, params: dict[str, Any], items: list[dict[str, Any]], *, as_json: bool = True
) -> Any:
    response = post(server.url, f"/v1/extract/{model}", {"items": items, "params": params}, as_json=as_json)
    assert response.status_code == 200, response.text
    return decode(response)


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
@pytest.mark.parametrize("model", MODELS)
def test_typed_questions_answer_as_gliner2_scores(
    families: Families, scorers: dict[str, Any], model: str, as_json: bool
) -> None:
    server, _ = families
    payload = extract(
        server, model, {"output_schema": QUESTIONS}, [{"text": t} for t in TEXTS], as_json=as_json
    )
    tasks = [
        ("intent", {"refund": "money back", "other": None, "chat": None}, "What is asked?", False),
        ("angry", {"yes": "shouting", "no": None}, "Is the user angry?", False),
        ("severity", {"0": "none", "1": "minor", "2": '{"level": "major"}'}, "How severe?", False),
    ]
    for item, logits in zip(payload["items"], package_logits(scorers[model], tasks, TEXTS), strict=True):
        assert item["classifications"] == [] and item["entities"] == []
        data = item["data"]
        p = softmax(list(logits["intent"].values()))
        assert data["intent"]["type"] == "choice"
        assert data["intent"]["choice"] == ["refund", "other", "chat"][int(np.argmax(p))]
        np.testing.assert_allclose(list(data["intent"]["probabilities"].values()), p, atol=ATOL)
        assert list(data["intent"]["probabilities"]) == ["refund", "other", "chat"]
        assert data["intent"]["confidence"] == pytest.approx(entropy_confidence(p), abs=ATOL)
        p_yes = softmax([logits["angry"]["yes"], logits["angry"]["no"]])[0]
        assert data["angry"] == {
            "type": "noul",
            "noul": pytest.approx(p_yes, abs=ATOL),
            "answer": p_yes > 0.5,
            "confidence": pytest.approx(max(p_yes, 1 - p_yes), abs=ATOL),
        }
        levels = softmax([logits["severity"][k] for k in ("0", "1", "2")])
        assert data["severity"]["score"] == pytest.approx(levels[1] + 2 * levels[2], abs=ATOL)
        assert data["severity"]["legend"] == {"0": "none", "1": "minor", "2": {"level": "major"}}
        np.testing.assert_allclose(list(data["severity"]["probabilities"].values()), levels, atol=ATOL)


@pytest.mark.parametrize("model", MODELS)
def test_label_groups_answer_in_data_and_classifications(
    families: Families, scorers: dict[str, Any], model: str
) -> None:
    server, _ = families
    groups = {"topic": ["billing", "login"], "tone": ["calm", "upset", "mixed"]}
    params = {
        "instruction": "Tag it",
        "options": {"label_groups": groups, "classification_type": "multi-label"},
    }
    payload = extract(server, model, params, [{"text": t} for t in TEXTS])
    tasks = [(g, dict.fromkeys(labels), "Tag it", True) for g, labels in groups.items()]
    for item, logits in zip(payload["items"], package_logits(scorers[model], tasks, TEXTS), strict=True):
        want = {f"{g}.{label}": sigmoid(z) for g, scores in logits.items() for label, z in scores.items()}
        got = {c["label"]: c["score"] for c in item["classifications"]}
        assert set(got) == set(want)
        np.testing.assert_allclose([got[k] for k in want], list(want.values()), atol=ATOL)
        assert [c["score"] for c in item["classifications"]] == sorted(got.values(), reverse=True)
        for g, labels in groups.items():
            assert item["data"][g]["labels"] == [label for label in labels if want[f"{g}.{label}"] >= 0.5]


@pytest.mark.parametrize("model", MODELS)
def test_labels_score_in_classifications_above_the_threshold(
    families: Families, scorers: dict[str, Any], model: str
) -> None:
    server, _ = families
    labels = ["refund", "bug report", "praise"]
    payload = extract(
        server, model, {"labels": labels, "options": {"threshold": 0.3}}, [{"text": t} for t in TEXTS]
    )
    logits = package_logits(scorers[model], [("label", dict.fromkeys(labels), None, False)], TEXTS)
    for item, scores in zip(payload["items"], logits, strict=True):
        p = dict(zip(labels, softmax([scores["label"][k] for k in labels]), strict=True))
        want = sorted(((k, v) for k, v in p.items() if v >= 0.3), key=lambda kv: -kv[1])
        assert [c["label"] for c in item["classifications"]] == [k for k, _ in want]
        np.testing.assert_allclose(
            [c["score"] for c in item["classifications"]], [v for _, v in want], atol=ATOL
        )
        assert item["data"] == {}


def test_states_read_as_json_text(families: Families, scorers: dict[str, Any]) -> None:
    server, _ = families
    state = {"user": "Wo ist meine Bestellung?", "order": 42, "tags": ["late", "\u00fc"]}
    params = {"labels": ["late", "early"]}
    payload = extract(server, GLINER2_DECIDE, params, [{"metadata": {"state": state}}])
    (logits,) = package_logits(
        scorers[GLINER2_DECIDE],
        [("label", {"late": None, "early": None}, None, False)],
        [json.dumps(state, ensure_ascii=False)],
    )
    p = softmax([logits["label"]["late"], logits["label"]["early"]])
    got = {c["label"]: c["score"] for c in payload["items"][0]["classifications"]}
    np.testing.assert_allclose([got["late"], got["early"]], p, atol=ATOL)


@pytest.mark.parametrize(
    ("params", "items", "fragment"),
    [
        ({}, [{"text": "x"}], "needs typed questions"),
        ({"labels": ["a"], "output_schema": QUESTIONS}, [{"text": "x"}], "not both"),
        ({"output_schema": QUESTIONS, "instruction": "hi"}, [{"text": "x"}], "own 'instructions'"),
        ({"labels": ["a", " a "]}, [{"text": "x"}], "unique"),
        ({"labels": ["a [L] b"]}, [{"text": "x"}], "structural token"),
        ({"labels": ["a"], "options": {"label_groups": {"g": ["b"]}}}, [{"text": "x"}], "not both"),
        ({"options": {"label_groups": {"g": []}}}, [{"text": "x"}], "non-empty list"),
        ({"labels": ["a"], "options": {"threshold": 2}}, [{"text": "x"}], "threshold"),
        ({"labels": ["a"], "options": {"overflow_policy": "drop"}}, [{"text": "x"}], "overflow_policy"),
        ({"labels": ["a"], "options": {"examples": [["x", "a"]]}}, [{"text": "x"}], "few-shot"),
        (
            {"labels": ["a"], "options": {"multi_label": True, "classification_type": "single-label"}},
            [{"text": "x"}],
            "contradicts",
        ),
        (
            {"output_schema": {"q": {"type": "choice", "instructions": "?", "criteria": []}}},
            [{"text": "x"}],
            "needs 'criteria'",
        ),
        ({"output_schema": {"q": {"type": "maybe", "instructions": "?"}}}, [{"text": "x"}], "unknown type"),
        ({"labels": ["a"]}, [{"text": "   "}], "non-blank"),
        ({"labels": ["a"]}, [{"text": "x", "metadata": {"state": "y"}}], "not both"),
        ({"labels": ["a"]}, [{"metadata": {"state": 7}}], "metadata.state"),
    ],
)
def test_bad_requests_are_400(
    families: Families, params: dict[str, Any], items: list[dict[str, Any]], fragment: str
) -> None:
    server, _ = families
    response = httpx.post(
        f"{server.url}/v1/extract/{GLINER2_DECIDE}", json={"items": items, "params": params}, timeout=60
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"], detail


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"labels": [f"label number {i}" for i in range(40)]}, "questions and labels take"),
        ({"labels": ["a", "b"], "options": {"overflow_policy": "error"}}, "overflow_policy 'error'"),
    ],
)
def test_rows_past_the_window_are_413_and_the_server_serves_on(
    families: Families, params: dict[str, Any], fragment: str
) -> None:
    server, _ = families
    body = {"items": [{"text": "short"}, {"text": "word " * (2 * DECIDE_WINDOW)}], "params": params}
    response = httpx.post(f"{server.url}/v1/extract/{GLINER2_DECIDE}", json=body, timeout=60)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INPUT_TOO_LONG" and fragment in detail["message"], detail
    ok = httpx.post(
        f"{server.url}/v1/extract/{GLINER2_DECIDE}",
        json={**body, "params": {"labels": ["a", "b"]}},
        timeout=60,
    )
    assert ok.status_code == 200, ok.text  # a long text is cut to its first words by default
    assert len(decode(ok)["items"]) == 2


@pytest.mark.skipif(not SDK_PYTHON.exists(), reason=f"{SDK_PYTHON} missing (scripts/install.sh --test)")
def test_the_sie_sdk_sends_questions_and_states_and_reads_the_answers(
    families: Families, scorers: dict[str, Any]
) -> None:
    server, _ = families
    turns = [{"role": "user", "content": "my card was charged twice"}, {"role": "agent", "content": "sorry!"}]
    actions = [
        {
            "op": "extract",
            "model": GLINER2_DECIDE,
            "items": [{"text": t} for t in TEXTS[:2]],
            "kwargs": {"output_schema": {"intent": QUESTIONS["intent"]}},
        },
        {
            "op": "extract",
            "model": GLINER2_DECIDE,
            "items": {"metadata": {"state": turns}},
            "kwargs": {"labels": ["billing", "login"], "instruction": "Route the chat"},
        },
    ]
    questions, state = run_sdk(server.url, actions)
    intent = [("intent", {"refund": "money back", "other": None, "chat": None}, "What is asked?", False)]
    for result, logits in zip(
        ok(questions), package_logits(scorers[GLINER2_DECIDE], intent, TEXTS[:2]), strict=True
    ):
        p = softmax(list(logits["intent"].values()))
        np.testing.assert_allclose(list(result["data"]["intent"]["probabilities"].values()), p, atol=ATOL)
    text = json.dumps(turns, ensure_ascii=False)
    (logits,) = package_logits(
        scorers[GLINER2_DECIDE],
        [("label", {"billing": None, "login": None}, "Route the chat", False)],
        [text],
    )
    want = dict(
        zip(
            ["billing", "login"], softmax([logits["label"]["billing"], logits["label"]["login"]]), strict=True
        )
    )
    got = {c["label"]: c["score"] for c in ok(state)["classifications"]}
    np.testing.assert_allclose([got["billing"], got["login"]], [want["billing"], want["login"]], atol=ATOL)
