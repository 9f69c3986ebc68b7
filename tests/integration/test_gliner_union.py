"""GLiNER unions end to end: a real server against the `gliner` package's predictions on the tiny
union of tests.integration.families (each member, each window), composed as SIE's recipe says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from sie.gliner_union import union_options
from tests.gpu_proc.test_gliner_union_adapter import LABELS, TEXTS, assert_same, reference
from tests.integration.families import GLINER_UNION
from tests.integration.server import Server
from tests.integration.wire import decode, post
from tests.tiny_models.gliner_union import DEFAULT_LABELS, FIRST, RUNTIME, SECOND

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def members(families: Families) -> list[tuple[Any, bool]]:
    gliner = pytest.importorskip("gliner")
    folder = families[1][GLINER_UNION]
    load = gliner.GLiNER.from_pretrained
    return [
        (load(str(folder / FIRST), local_files_only=True), False),
        (load(str(folder / SECOND), local_files_only=True), True),
    ]


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize(
    ("labels", "options"),
    [(LABELS, {}), (None, {}), (LABELS, {"score_floor": 0.5, "window_words": 6, "window_overlap": 1})],
)
def test_entities_match_the_members_composed(
    families: Families,
    members: list[tuple[Any, bool]],
    labels: list[str] | None,
    options: dict[str, Any],
    as_json: bool,
) -> None:
    server, _ = families
    params: dict[str, Any] = {"options": options, **({"labels": labels} if labels else {})}
    body = {"items": [{"text": t} for t in TEXTS], "params": params}
    response = post(server.url, f"/v1/extract/{GLINER_UNION}", body, as_json=as_json)
    assert response.status_code == 200, response.text
    opts = union_options({**RUNTIME, **options})
    total = 0
    for text, item in zip(TEXTS, decode(response)["items"], strict=True):
        assert_same(item["entities"], reference(members, text, labels or DEFAULT_LABELS, opts))
        total += len(item["entities"])
    assert total >= 10


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"labels": ["a", ""]}, "empty labels"),
        ({"labels": [f"l{i}" for i in range(1001)]}, "at most 1000"),
        ({"labels": ["person"], "options": {"window_words": 0}}, "window_words"),
        ({"labels": ["person"], "options": {"score_floor": "high"}}, "score_floor"),
    ],
)
def test_bad_requests_are_400(families: Families, params: dict[str, Any], fragment: str) -> None:
    server, _ = families
    body = {"items": [{"text": "Tim Cook"}], "params": params}
    response = httpx.post(f"{server.url}/v1/extract/{GLINER_UNION}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"]


def test_sdk_extract_gives_the_members_entities(families: Families, members: list[tuple[Any, bool]]) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = families
    texts = TEXTS[:3]
    action = {
        "op": "extract",
        "model": GLINER_UNION,
        "items": [{"text": t} for t in texts],
        "kwargs": {"labels": LABELS},
    }
    [entry] = run_sdk(server.url, [action])
    opts = union_options(RUNTIME)
    items = ok(entry)
    for text, item in zip(texts, items, strict=True):
        assert_same(item["entities"], reference(members, text, LABELS, opts))
    assert sum(len(item["entities"]) for item in items) >= 5
