"""GLiFormer end to end: a real server against the `gliformer` package's own inference on the tiny
random-weight model of tests.integration.families, and the requests it refuses."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.gpu_proc.test_gliformer_adapter import LABEL_SETS, SCORE_ATOL, TEXTS, expected, load_reference
from tests.integration.families import GLIFORMER
from tests.integration.server import Server
from tests.integration.wire import decode, dense_matrix, post

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def model(families: Families) -> Any:
    pytest.importorskip("gliformer")
    return load_reference(families[1][GLIFORMER])


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("options", [{}, {"threshold": 0.3}])
def test_entities_match_gliformer(
    families: Families, model: Any, as_json: bool, options: dict[str, Any]
) -> None:
    server, _ = families
    labels = LABEL_SETS[0]
    items = [{"id": str(i), "text": text} for i, text in enumerate(TEXTS)]
    body = {"items": items, "params": {"labels": labels, "options": options}}
    response = post(server.url, f"/v1/extract/{GLIFORMER}", body, as_json=as_json)
    assert response.status_code == 200, response.text
    found = 0
    for text, item in zip(TEXTS, decode(response)["items"], strict=True):
        want = expected(model, text, labels, options.get("threshold", 0.5))
        got = item["entities"]
        assert [(e["start"], e["end"], e["text"], e["label"]) for e in got] == [
            (e["start"], e["end"], e["text"], e["label"]) for e in want
        ]
        np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=SCORE_ATOL)
        found += len(got)
    assert found


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({}, "labels"),
        ({"labels": []}, "labels"),
        ({"labels": ["a", " "]}, "labels"),
        ({"labels": [f"l{i}" for i in range(1001)]}, "at most 1000"),
        ({"labels": [f"l{i}" for i in range(40)]}, "maximum input length"),
        ({"labels": ["person"], "options": {"relation_labels": ["works at"]}}, "relation_labels"),
        ({"labels": ["person"], "options": {"output_schema": {"type": "object"}}}, "output_schema"),
        ({"labels": ["person"], "options": {"flat_ner": "yes"}}, "flat_ner"),
        ({"labels": ["person"], "options": {"threshold": 0.05}}, "at least 0.1"),
    ],
)
def test_bad_requests_are_400(families: Families, params: dict[str, Any], fragment: str) -> None:
    server, _ = families
    body = {"items": [{"text": "Tim Cook met Satya Nadella"}], "params": params}
    response = httpx.post(f"{server.url}/v1/extract/{GLIFORMER}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"]


@pytest.mark.parametrize("as_json", [False, True])
def test_encode_matches_embed_text(families: Families, model: Any, as_json: bool) -> None:
    server, _ = families
    texts = TEXTS[:4]
    body = {"items": [{"text": text} for text in texts]}
    response = post(server.url, f"/v1/encode/{GLIFORMER}", body, as_json=as_json)
    assert response.status_code == 200, response.text
    got = dense_matrix(decode(response))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model.embed_text(texts, batch_size=1).numpy()
    want /= np.linalg.norm(want, axis=1, keepdims=True)  # the server normalizes, as SIE's adapter does
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_sdk_extract_and_encode_match_gliformer(families: Families, model: Any) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = families
    texts, labels = TEXTS[:3], LABEL_SETS[0]
    items = [{"text": t} for t in texts]
    actions = [
        {"op": "extract", "model": GLIFORMER, "items": items, "kwargs": {"labels": labels}},
        {"op": "encode", "model": GLIFORMER, "items": items},
    ]
    extracted, encoded = (ok(entry) for entry in run_sdk(server.url, actions))
    for text, item in zip(texts, extracted, strict=True):
        want = expected(model, text, labels, 0.5)
        got = item["entities"]
        assert [(e["start"], e["end"], e["text"], e["label"]) for e in got] == [
            (e["start"], e["end"], e["text"], e["label"]) for e in want
        ]
        np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=SCORE_ATOL)
    assert any(item["entities"] for item in extracted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dense = model.embed_text(texts, batch_size=1).numpy()
    dense /= np.linalg.norm(dense, axis=1, keepdims=True)
    np.testing.assert_allclose([e["dense"]["values"] for e in encoded], dense, atol=1e-4)
