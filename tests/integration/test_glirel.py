"""GLiREL end to end: a real server against the `glirel` package's own predict_relations on the tiny
random-weight model of tests.integration.families, and the requests it refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gpu_proc.test_glirel_adapter import ITEMS, LABELS, assert_same, load_reference, reference
from tests.integration.families import GLIREL
from tests.integration.server import Server
from tests.integration.wire import decode, post
from tests.tiny_models.glirel import THRESHOLD

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def model(families: Families) -> Any:
    pytest.importorskip("glirel")
    return load_reference(families[1][GLIREL])


def extract(
    server: Server, items: list[dict[str, Any]], params: dict[str, Any], as_json: bool
) -> httpx.Response:
    return post(server.url, f"/v1/extract/{GLIREL}", {"items": items, "params": params}, as_json=as_json)


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("options", [{}, {"threshold": 0.6, "top_k": 1}])
def test_relations_match_glirel(
    families: Families, model: Any, as_json: bool, options: dict[str, Any]
) -> None:
    server, _ = families
    items = [{"id": str(i), "text": t, "metadata": {"entities": e}} for i, (t, e) in enumerate(ITEMS)]
    response = extract(server, items, {"labels": LABELS, "options": options}, as_json)
    assert response.status_code == 200, response.text
    found = decode(response)["items"]
    labels = list(dict.fromkeys(LABELS))
    total = 0
    for (text, entities), item in zip(ITEMS, found, strict=True):
        threshold, top_k = options.get("threshold", THRESHOLD), options.get("top_k", 10)
        assert_same(item["relations"], reference(model, text, entities, labels, threshold, top_k))
        assert [(e["start"], e["end"], e["text"], e["label"]) for e in item["entities"]] == [
            (e["start"], e["end"], e["text"], e["label"]) for e in entities
        ]
        total += len(item["relations"])
    assert total >= 5


@pytest.mark.parametrize(
    ("params", "metadata", "fragment"),
    [
        ({}, {"entities": [{"start": 0, "end": 3}]}, "labels"),
        ({"labels": []}, {"entities": [{"start": 0, "end": 3}]}, "labels"),
        ({"labels": ["a", ""]}, {"entities": [{"start": 0, "end": 3}]}, "empty labels"),
        ({"labels": [f"r{i}" for i in range(1001)]}, {"entities": [{"start": 0, "end": 3}]}, "at most 1000"),
        ({"labels": ["met"]}, None, "entities"),
        ({"labels": ["met"]}, {"entities": [{"start": 0, "end": 300}]}, "offsets"),
        ({"labels": ["met"], "options": {"top_k": 1.5}}, {"entities": [{"start": 0, "end": 3}]}, "top_k"),
    ],
)
def test_bad_requests_are_400(
    families: Families, params: dict[str, Any], metadata: dict[str, Any] | None, fragment: str
) -> None:
    server, _ = families
    item = {"text": "Tim Cook met Satya Nadella", "metadata": metadata}
    response = httpx.post(
        f"{server.url}/v1/extract/{GLIREL}", json={"items": [item], "params": params}, timeout=30
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"]


def test_sdk_extract_gives_glirels_relations(families: Families, model: Any) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = families
    chosen = ITEMS[:2]
    items = [{"text": t, "metadata": {"entities": e}} for t, e in chosen]
    action = {"op": "extract", "model": GLIREL, "items": items, "kwargs": {"labels": LABELS}}
    [entry] = run_sdk(server.url, [action])
    labels = list(dict.fromkeys(LABELS))
    found = ok(entry)
    for (text, entities), item in zip(chosen, found, strict=True):
        assert_same(item["relations"], reference(model, text, entities, labels, THRESHOLD, 10))
    assert sum(len(item["relations"]) for item in found) >= 2
