"""GLiNER relex end to end: a real server against the `gliner` package's own inference (entities and
relations) on the tiny random-weight relex model of tests.integration.families."""

from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.families import GLINER, GLINER_RELEX
from tests.integration.server import Server
from tests.integration.wire import decode, post
from tests.tiny_models.gliner_relex import RELATION_THRESHOLD

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
    "Tim Cook met Satya Nadella",
]
LABELS = ["person", "location", "organization"]
RELATIONS = ["works at", "lives in", "visited", "met"]


@pytest.fixture(scope="module")
def reference(families: Families) -> Any:
    gliner = pytest.importorskip("gliner")
    return gliner.GLiNER.from_pretrained(str(families[1][GLINER_RELEX]), local_files_only=True)


def extract(server: Server, params: dict[str, Any], *, as_json: bool = False) -> httpx.Response:
    body = {"items": [{"text": t} for t in TEXTS], "params": params}
    return post(server.url, f"/v1/extract/{GLINER_RELEX}", body, as_json=as_json)


def expected(
    reference: Any, text: str, relations: list[str], threshold: float, relation_threshold: float
) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        entities, found = reference.inference(
            [text],
            LABELS,
            relations=relations,
            threshold=threshold,
            relation_threshold=relation_threshold,
            adjacency_threshold=max(threshold, 0.5),  # what SIE passes
        )
    flat = [(r["head"]["text"], r["tail"]["text"], r["relation"], r["score"]) for r in found[0]]
    return entities[0], flat


def assert_matches(
    items: list[dict[str, Any]],
    reference: Any,
    relations: list[str],
    threshold: float,
    relation_threshold: float,
) -> int:
    found = 0
    for item, text in zip(items, TEXTS, strict=True):
        want_entities, want_relations = expected(reference, text, relations, threshold, relation_threshold)
        assert [(e["label"], e["start"], e["end"], e["text"]) for e in item["entities"]] == [
            (w["label"], w["start"], w["end"], w["text"]) for w in want_entities
        ]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [w["score"] for w in want_entities], atol=1e-4
        )
        got = sorted((r["head"], r["tail"], r["relation"], r["score"]) for r in item["relations"])
        assert [g[:3] for g in got] == [w[:3] for w in sorted(want_relations)]
        np.testing.assert_allclose([g[3] for g in got], [w[3] for w in sorted(want_relations)], atol=1e-4)
        assert [r["score"] for r in item["relations"]] == sorted(
            (r["score"] for r in item["relations"]), reverse=True
        )
        found += len(got)
    return found


@pytest.mark.parametrize("as_json", [False, True])
def test_relations_match_gliner_inference(families: Families, reference: Any, as_json: bool) -> None:
    server, _ = families
    found = 0
    for threshold, relation_threshold in ((0.3, 0.5), (0.5, 0.8)):
        options = {
            "threshold": threshold,
            "relation_labels": RELATIONS,
            "relation_threshold": relation_threshold,
        }
        response = extract(server, {"labels": LABELS, "options": options}, as_json=as_json)
        assert response.status_code == 200, response.text
        found += assert_matches(
            decode(response)["items"], reference, RELATIONS, threshold, relation_threshold
        )
    assert found >= 5


def test_profile_relation_threshold_is_the_default(families: Families, reference: Any) -> None:
    server, _ = families
    response = extract(
        server, {"labels": LABELS, "options": {"threshold": 0.3, "relation_labels": RELATIONS}}
    )
    assert response.status_code == 200, response.text
    assert assert_matches(decode(response)["items"], reference, RELATIONS, 0.3, RELATION_THRESHOLD)


def test_without_relation_labels_only_entities(families: Families, reference: Any) -> None:
    server, _ = families
    response = extract(server, {"labels": LABELS, "options": {"threshold": 0.3}})
    assert response.status_code == 200, response.text
    items = decode(response)["items"]
    assert all(item["relations"] == [] for item in items)
    assert_matches(items, reference, [], 0.3, 0.3)


def test_concurrent_thresholds_stay_apart(families: Families, reference: Any) -> None:
    """The device reads one entity threshold per batch: requests with different ones never share."""
    server, _ = families
    settings = [(0.3, 0.5), (0.5, 0.5), (0.7, 0.5), (0.4, 0.6)] * 3

    def one(setting: tuple[float, float]) -> tuple[tuple[float, float], httpx.Response]:
        threshold, relation_threshold = setting
        options = {
            "threshold": threshold,
            "relation_labels": RELATIONS,
            "relation_threshold": relation_threshold,
        }
        return setting, extract(server, {"labels": LABELS, "options": options}, as_json=True)

    with ThreadPoolExecutor(len(settings)) as pool:
        for (threshold, relation_threshold), response in pool.map(one, settings):
            assert response.status_code == 200, response.text
            assert_matches(response.json()["items"], reference, RELATIONS, threshold, relation_threshold)


@pytest.mark.parametrize(
    ("model", "params", "fragment"),
    [
        (GLINER_RELEX, {}, "labels"),
        (GLINER_RELEX, {"labels": ["a"] * 1001}, "at most 1000"),
        (GLINER_RELEX, {"labels": ["person"], "options": {"relation_labels": "works at"}}, "relation_labels"),
        (GLINER_RELEX, {"labels": ["person"], "options": {"relation_labels": ["a", ""]}}, "relation_labels"),
        (GLINER_RELEX, {"labels": ["person"], "options": {"relation_labels": ["a", "a"]}}, "unique"),
        (
            GLINER_RELEX,
            {"labels": ["person"], "options": {"relation_labels": [f"r{i}" for i in range(1000)]}},
            "at most 1000",
        ),
        (GLINER_RELEX, {"labels": ["person"], "options": {"relation_threshold": 2}}, "relation_threshold"),
        (GLINER_RELEX, {"labels": ["person"], "options": {"threshold": 0.05}}, "at least 0.1"),
        (
            GLINER,
            {"labels": ["person"], "options": {"relation_labels": ["works at"]}},
            "does not extract relations",
        ),
    ],
)
def test_bad_relation_requests_are_400(
    families: Families, model: str, params: dict[str, Any], fragment: str
) -> None:
    server, _ = families
    response = httpx.post(
        f"{server.url}/v1/extract/{model}", json={"items": [{"text": "x"}], "params": params}, timeout=30
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"]


def test_sdk_extract_gives_gliners_relations(families: Families, reference: Any) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = families
    options = {"threshold": 0.3, "relation_labels": RELATIONS, "relation_threshold": 0.5}
    items = [{"text": t} for t in TEXTS]
    action = {
        "op": "extract",
        "model": GLINER_RELEX,
        "items": items,
        "kwargs": {"labels": LABELS, "options": options},
    }
    [entry] = run_sdk(server.url, [action])
    assert assert_matches(ok(entry), reference, RELATIONS, 0.3, 0.5)
