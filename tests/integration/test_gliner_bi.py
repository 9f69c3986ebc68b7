"""GLiNER bi-encoder end to end: a real server (and the real SDK) against gliner's predict_entities.

The model is the tiny random-weight bi-encoder of tests.integration.families (ModernBERT text
encoder, BERT labels encoder); the reference runs the same folder in this process.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.families import GLINER_BI
from tests.integration.server import Server
from tests.integration.wire import decode, post

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Paris is nice.",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
]
LABELS = ["person", "location", "organization"]


@pytest.fixture(scope="module")
def reference(families: Families) -> Any:
    gliner = pytest.importorskip("gliner")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gliner's "resizing embeddings is not supported" for bi-encoders
        return gliner.GLiNER.from_pretrained(str(families[1][GLINER_BI]), local_files_only=True)


def extract(server: Server, params: dict[str, Any], *, as_json: bool = False) -> httpx.Response:
    body = {"items": [{"text": t} for t in TEXTS], "params": params}
    return post(server.url, f"/v1/extract/{GLINER_BI}", body, as_json=as_json)


def assert_matches(items: list[dict[str, Any]], reference: Any, labels: list[str], **options: Any) -> int:
    found = 0
    for item, text in zip(items, TEXTS, strict=True):
        want = reference.predict_entities(text, labels, **options)
        assert [(e["label"], e["start"], e["end"], e["text"]) for e in item["entities"]] == [
            (w["label"], w["start"], w["end"], w["text"]) for w in want
        ]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [w["score"] for w in want], atol=1e-4
        )
        found += len(want)
    return found


@pytest.mark.parametrize("as_json", [False, True])
def test_gliner_bi_matches_predict_entities(families: Families, reference: Any, as_json: bool) -> None:
    server, _ = families
    found = 0
    # The same labels twice (the second from the device's label cache), then another set.
    for labels, threshold in ((LABELS, 0.5), (LABELS, 0.7), (["city", "person"], 0.5)):
        response = extract(server, {"labels": labels, "options": {"threshold": threshold}}, as_json=as_json)
        assert response.status_code == 200, response.text
        found += assert_matches(decode(response)["items"], reference, labels, threshold=threshold)
    assert found >= 5


def test_gliner_bi_options_match_predict_entities(families: Families, reference: Any) -> None:
    server, _ = families
    options = {"threshold": 0.4, "flat_ner": False, "multi_label": True, "precompute_labels": False}
    response = extract(server, {"labels": LABELS, "options": options})
    assert response.status_code == 200, response.text
    assert assert_matches(
        decode(response)["items"], reference, LABELS, threshold=0.4, flat_ner=False, multi_label=True
    )


def test_a_thousand_labels_ride_with_every_item(families: Families, reference: Any) -> None:
    # SIE's most labels: each item carries all their ids (thousands of tokens) to the device.
    server, _ = families
    labels = [*LABELS, *(f"kind {n}" for n in range(1000 - len(LABELS)))]
    response = extract(server, {"labels": labels, "options": {"threshold": 0.9}})
    assert response.status_code == 200, response.text
    assert_matches(decode(response)["items"], reference, labels, threshold=0.9)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({}, "labels"),
        ({"labels": []}, "labels"),
        ({"labels": ["a"] * 1001}, "at most 1000"),
        ({"labels": ["person", " "]}, "empty labels"),
        ({"labels": ["person"], "options": {"relation_labels": ["works at"]}}, "relation_labels"),
        ({"labels": ["person"], "options": {"threshold": 2}}, "threshold"),
        ({"labels": ["person"], "options": {"flat_ner": "yes"}}, "flat_ner"),
    ],
)
def test_bad_gliner_bi_requests_are_400(families: Families, params: dict[str, Any], fragment: str) -> None:
    server, _ = families
    response = httpx.post(
        f"{server.url}/v1/extract/{GLINER_BI}", json={"items": [{"text": "x"}], "params": params}, timeout=30
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"]


def test_sdk_extracts_gliner_bi_entities(families: Families) -> None:
    """`client.extract(model, item, labels=[...])` through the real SDK, against the server's JSON."""
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing; `bash scripts/install.sh --test` makes it")
    server, _ = families
    text = TEXTS[2]
    actions = [
        {"op": "extract", "model": GLINER_BI, "items": {"text": text}, "kwargs": {"labels": LABELS}},
        {"op": "extract", "model": GLINER_BI, "items": {"text": text}},
    ]
    spans, no_labels = run_sdk(server.url, actions)
    body = {"items": [{"text": text}], "params": {"labels": LABELS}}
    want = post(server.url, f"/v1/extract/{GLINER_BI}", body, as_json=True).json()["items"][0]
    assert want["entities"]  # an empty answer would make the comparison below vacuous
    result = ok(spans)
    [got] = result if isinstance(result, list) else [result]
    assert got["entities"] == want["entities"]
    assert not no_labels["ok"] and no_labels["error"]["status_code"] == 400
