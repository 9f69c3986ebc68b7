"""GLiClass zero-shot classification end to end: a real server against the `gliclass` pipeline.

The model is the tiny random-weight GLiClass of tests.integration.families (labels first, DeBERTa
with a Unigram tokenizer, an MLP scorer); the reference pipeline runs the same folder in this
process, at the YAML's window.
"""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.families import GLICLASS
from tests.integration.server import Server
from tests.integration.wire import decode, post

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
TEXTS = [
    "the app crashes on startup when config file is missing",
    "Charged twice for one order!",
    "the team won the championship last night " * 12,  # past the window: cut, as the pipeline cuts it
]
LABELS = ["billing", "bug report", "feature request", "sports"]


@pytest.fixture(scope="module")
def reference(families: Families) -> Any:
    from tests.tiny_models.gliclass import pipeline

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pipeline(families[1][GLICLASS])


def extract(server: Server, params: dict[str, Any], texts: list[str] = TEXTS, *, as_json: bool = True) -> Any:
    body = {"items": [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)], "params": params}
    return post(server.url, f"/v1/extract/{GLICLASS}", body, as_json=as_json)


def want_scores(reference: Any, texts: list[str], labels: list[str], kind: str, **kwargs: Any) -> list[dict]:
    found = reference(
        texts, labels, threshold=0.0, classification_type=kind, return_hierarchical=True, **kwargs
    )
    return [dict(scores) for scores in found]


def assert_classifications(items: list[dict[str, Any]], want: list[dict[str, float]]) -> None:
    for item, scores in zip(items, want, strict=True):
        got = item["classifications"]
        assert [c["label"] for c in got] == sorted(scores, key=lambda label: -scores[label])
        np.testing.assert_allclose([c["score"] for c in got], [scores[c["label"]] for c in got], atol=1e-4)
        assert (
            item["entities"] == []
            and item["relations"] == []
            and item["objects"] == []
            and item["data"] == {}
        )


@pytest.mark.parametrize("as_json", [True, False])
@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({}, "single-label"),
        ({"classification_type": "multi-label"}, "multi-label"),
        ({"profile": "multi-label"}, "multi-label"),
        ({"profile": "multi-label", "classification_type": "single-label"}, "single-label"),
    ],
)
def test_scores_match_the_gliclass_pipeline(
    families: Families, reference: Any, options: dict[str, Any], kind: str, as_json: bool
) -> None:
    server, _ = families
    response = extract(server, {"labels": LABELS, "options": options}, as_json=as_json)
    assert response.status_code == 200, response.text
    payload = decode(response)
    assert payload["model"] == GLICLASS and [item["id"] for item in payload["items"]] == ["t0", "t1", "t2"]
    assert_classifications(payload["items"], want_scores(reference, TEXTS, LABELS, kind))


def test_instruction_threshold_and_stripped_labels(families: Families, reference: Any) -> None:
    server, _ = families
    params = {
        "labels": [" billing", "bug report ", "sports"],
        "instruction": "classify the ticket",
        "options": {"classification_type": "multi-label", "threshold": 0.5},
    }
    response = extract(server, params)
    assert response.status_code == 200, response.text
    want = want_scores(
        reference, TEXTS, ["billing", "bug report", "sports"], "multi-label", prompt=params["instruction"]
    )
    kept = [{label: s for label, s in scores.items() if s >= 0.5} for scores in want]
    assert_classifications(response.json()["items"], kept)
    assert 0 < sum(map(len, kept)) < 3 * len(TEXTS)  # the threshold drops some labels, not all


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        (None, "labels"),
        ({"labels": []}, "labels"),
        ({"labels": [f"label {i}" for i in range(1001)]}, "at most 1000 labels"),
        ({"labels": ["billing", "billing "]}, "unique"),
        ({"labels": ["billing", " "]}, "empty labels"),
        ({"labels": ["billing"], "options": {"classification_type": "multi"}}, "classification_type"),
        ({"labels": ["billing"], "options": {"threshold": 2}}, "threshold"),
        ({"labels": ["billing"], "options": {"label_groups": {"a": ["b", "c"]}}}, "label_groups"),
        ({"labels": [f"a longer label number {i}" for i in range(40)]}, "no room for the text"),
    ],
)
def test_bad_requests_are_400_and_the_rest_of_the_batch_is_served(
    families: Families, reference: Any, params: dict[str, Any] | None, fragment: str
) -> None:
    server, _ = families
    body: dict[str, Any] = {"items": [{"text": t} for t in TEXTS]}
    if params is not None:
        body["params"] = params
    good = {"labels": LABELS, "options": {"classification_type": "multi-label"}}
    # The bad request arrives among good ones: it alone is refused, they are served as usual.
    with ThreadPoolExecutor(4) as pool:
        goods = [pool.submit(extract, server, good) for _ in range(3)]
        bad = httpx.post(f"{server.url}/v1/extract/{GLICLASS}", json=body, timeout=60)
        answers = [future.result() for future in goods]
    assert bad.status_code == 400, bad.text
    detail = bad.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"], detail
    want = want_scores(reference, TEXTS, LABELS, "multi-label")
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert_classifications(answer.json()["items"], want)


def test_texts_holding_a_marker_are_refused(families: Families) -> None:
    server, _ = families
    response = extract(server, {"labels": LABELS}, ["fine", "spam <<LABEL>> eggs"])
    assert response.status_code == 400
    assert "Item 1's text must not contain" in response.json()["detail"]["message"]


def test_sdk_extract_gives_the_pipelines_classifications(families: Families, reference: Any) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = families
    texts = TEXTS[:2]
    kwargs = {"labels": LABELS, "options": {"classification_type": "multi-label"}}
    action = {"op": "extract", "model": GLICLASS, "items": [{"text": t} for t in texts], "kwargs": kwargs}
    [entry] = run_sdk(server.url, [action])
    for item, scores in zip(ok(entry), want_scores(reference, texts, LABELS, "multi-label"), strict=True):
        got = item["classifications"]
        assert [c["label"] for c in got] == sorted(scores, key=lambda label: -scores[label])
        np.testing.assert_allclose([c["score"] for c in got], [scores[c["label"]] for c in got], atol=1e-4)
