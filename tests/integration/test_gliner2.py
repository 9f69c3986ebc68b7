"""GLiNER2 end to end: a real server's entities and classifications against the `gliner2` package
running the same tiny random weights (tests.integration.families) in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.gpu_proc.test_gliner2_adapter import reference_entities
from tests.integration.families import GLINER2, GLINER2_BOUNDARY
from tests.integration.server import Server
from tests.integration.wire import decode, post
from tests.tiny_models.gliner2 import MAX_WORDS, load_boundary_reference, load_reference

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004",
    "Apple bought Beats for $3 billion!",
    "",
]
LABELS = ["person", "location", "organization"]


@pytest.fixture(scope="module")
def reference(families: Families) -> Any:
    pytest.importorskip("gliner2")
    return load_reference(families[1][GLINER2])


def extract(server: Server, params: dict[str, Any], *, as_json: bool = True) -> list[dict[str, Any]]:
    body = {"items": [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)], "params": params}
    response = post(server.url, f"/v1/extract/{GLINER2}", body, as_json=as_json)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = decode(response)["items"]
    assert [set(item) for item in items] == [
        {"id", "entities", "relations", "classifications", "objects", "data"} for _ in TEXTS
    ]
    return items


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
@pytest.mark.parametrize("threshold", [0.45, 0.5])
def test_entities_match_gliner2(families: Families, reference: Any, threshold: float, as_json: bool) -> None:
    server, _ = families
    items = extract(server, {"labels": LABELS, "options": {"threshold": threshold}}, as_json=as_json)
    want = reference_entities(reference, TEXTS, LABELS, threshold)
    assert any(want), "the random model finds nothing: the comparison would be vacuous"
    for item, theirs, text in zip(items, want, TEXTS, strict=True):
        ours = item["entities"]
        assert [(e["label"], e["start"], e["end"]) for e in ours] == [
            (e["label"], e["start"], e["end"]) for e in theirs
        ]
        assert all(e["text"] == text[e["start"] : e["end"]] for e in ours)
        np.testing.assert_allclose([e["score"] for e in ours], [e["score"] for e in theirs], atol=1e-4)
        assert item["classifications"] == [] and item["data"] == {}


@pytest.mark.parametrize("multi_label", [False, True])
def test_classification_task_matches_gliner2(families: Families, reference: Any, multi_label: bool) -> None:
    server, _ = families
    labels = ["positive", "negative", "neutral"]
    options = {"classification_task": "sentiment", "multi_label": multi_label, "threshold": 0.2}
    items = extract(server, {"labels": labels, "options": options})
    task = {"sentiment": {"labels": labels, "multi_label": multi_label, "cls_threshold": 0.2}}
    raw = reference.batch_classify_text(TEXTS, task, threshold=0.2, include_confidence=True)
    for item, result in zip(items, raw, strict=True):
        found = result["sentiment"]
        want = sorted(
            [(c["label"], c["confidence"]) for c in (found if isinstance(found, list) else [found])],
            key=lambda c: -c[1],
        )
        got = item["classifications"]
        assert [c["label"] for c in got] == [label for label, score in want if score >= 0.2]
        np.testing.assert_allclose([c["score"] for c in got], [s for _, s in want if s >= 0.2], atol=1e-4)
        assert item["entities"] == []


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        (None, "requires labels"),
        ({"labels": []}, "requires labels"),
        ({"labels": [f"label {i}" for i in range(1001)]}, "at most 1000 labels"),
        ({"labels": ["person", "person "]}, "unique"),
        ({"labels": ["person", " "]}, "empty labels"),
        ({"labels": ["[E] person"]}, "marker tokens"),
        ({"labels": ["x" * 129]}, "at most 128 characters"),
        ({"labels": ["person"], "options": {"threshold": 2}}, "threshold"),
        ({"labels": ["person"], "options": {"multi_label": "yes"}}, "multi_label"),
        ({"labels": ["a"], "options": {"classification_task": "t", "positive_label": "b"}}, "positive_label"),
    ],
)
def test_bad_requests_are_400(families: Families, params: dict[str, Any] | None, fragment: str) -> None:
    server, _ = families
    body: dict[str, Any] = {"items": [{"text": "Paris is nice."}]}
    if params is not None:
        body["params"] = params
    response = httpx.post(f"{server.url}/v1/extract/{GLINER2}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"], detail


def test_output_schema_matches_gliner2(families: Families, reference: Any) -> None:
    from tests.gpu_proc.test_gliner2_adapter import OUTPUT_SCHEMAS, reference_data

    server, _ = families
    schema = OUTPUT_SCHEMAS[0]  # one description and one enum: their own order cannot differ
    items = extract(server, {"output_schema": schema, "options": {"threshold": 0.5}})
    want = reference_data(reference, TEXTS, schema, 0.5)
    assert any(want)
    assert [item["data"] for item in items] == want
    assert all(item["entities"] == [] and item["classifications"] == [] for item in items)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"output_schema": {"type": "array"}}, "root type must be object"),
        ({"output_schema": {"type": "object", "properties": {}}}, "non-empty properties"),
        ({"output_schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}, "supports only"),
        (
            {"output_schema": {"type": "object", "properties": {"a": {"type": "string"}}}, "labels": ["x"]},
            "labels",
        ),
    ],
)
def test_bad_output_schemas_are_400(families: Families, params: dict[str, Any], fragment: str) -> None:
    server, _ = families
    body = {"items": [{"text": "Paris is nice."}], "params": params}
    response = httpx.post(f"{server.url}/v1/extract/{GLINER2}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"], detail


def test_a_long_text_is_classified_in_windows(families: Families, reference: Any) -> None:
    from sie.frontend.gliner2_windows import pool, windows

    server, _ = families
    text = " ".join(TEXTS[:2]) + " " + "and then they talked about the weather " * 90  # ~650 words
    labels = ["safe", "unsafe"]
    options = {"classification_task": "prompt_safety", "positive_label": "unsafe", "threshold": 0.0}
    body = {"items": [{"text": text}], "params": {"labels": labels, "options": options}}
    response = post(server.url, f"/v1/extract/{GLINER2}", body, as_json=True)
    assert response.status_code == 200, response.text
    [got] = response.json()["items"][0]["classifications"]
    pieces = windows(text, MAX_WORDS)
    assert len(pieces) > 2
    tasks = {"prompt_safety": {"labels": labels, "multi_label": False, "cls_threshold": 0.0}}
    raw = reference.batch_classify_text(
        pieces, tasks, threshold=0.0, include_confidence=True, max_len=MAX_WORDS
    )
    found = [[(r["prompt_safety"]["label"], r["prompt_safety"]["confidence"])] for r in raw]
    [(label, score)] = pool(found, n_labels=2, multi_label=False, positive_label="unsafe")
    assert got["label"] == label
    np.testing.assert_allclose(got["score"], score, atol=1e-4)


# GLiNER2.5's boundary network, served under the same family (config.json says which network).
BOUNDARY_TEXTS = [
    "Angela Merkel met Emmanuel Macron in Paris and then in Paris again",
    "Zoe\u0308 Mu\u0308ller flew from \u0130stanbul to Kraków.",
    "",
]


@pytest.fixture(scope="module")
def boundary_reference(families: Families) -> Any:
    gliner2 = pytest.importorskip("gliner2")
    if int(gliner2.__version__.split(".")[0]) < 2:
        pytest.skip("boundary checkpoints need gliner2 2.x")
    return load_boundary_reference(families[1][GLINER2_BOUNDARY])


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
@pytest.mark.parametrize(
    "options",
    [{"threshold": 0.93}, {"threshold": 0.96, "entity_descriptions": {"person": "a human, by name"}}],
    ids=["plain", "described"],
)
def test_boundary_entities_match_gliner2(
    families: Families, boundary_reference: Any, options: dict[str, Any], as_json: bool
) -> None:
    from tests.gpu_proc.test_gliner2_boundary import reference_entities

    server, _ = families
    labels = ["person", "city"]
    body = {"items": [{"text": t} for t in BOUNDARY_TEXTS], "params": {"labels": labels, "options": options}}
    response = post(server.url, f"/v1/extract/{GLINER2_BOUNDARY}", body, as_json=as_json)
    assert response.status_code == 200, response.text
    items = decode(response)["items"]
    described = options.get("entity_descriptions", {})
    want = reference_entities(
        boundary_reference, BOUNDARY_TEXTS, {k: described.get(k, {}) for k in labels}, options["threshold"]
    )
    assert any(want)
    for item, theirs, text in zip(items, want, BOUNDARY_TEXTS, strict=True):
        ours = item["entities"]
        assert [(e["label"], e["start"], e["end"]) for e in ours] == [
            (e["label"], e["start"], e["end"]) for e in theirs
        ]
        assert all(e["text"] == text[e["start"] : e["end"]] for e in ours)
        np.testing.assert_allclose([e["score"] for e in ours], [e["score"] for e in theirs], atol=1e-4)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"labels": ["person"], "output_schema": {"type": "object"}}, "without output_schema"),
        ({"labels": ["a"], "options": {"classification_task": "t"}}, "only the threshold"),
        ({"labels": ["person", "person"]}, "unique"),
        ({"labels": ["person"], "options": {"entity_descriptions": {"city": "x"}}}, "existing labels"),
        ({"labels": ["person"], "options": {"entity_descriptions": {"person": "[E] x"}}}, "marker tokens"),
        ({"labels": ["person"], "options": {"threshold": -1}}, "threshold"),
    ],
)
def test_bad_boundary_requests_are_400(families: Families, params: dict[str, Any], fragment: str) -> None:
    server, _ = families
    body = {"items": [{"text": "Paris is nice."}], "params": params}
    response = httpx.post(f"{server.url}/v1/extract/{GLINER2_BOUNDARY}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"], detail


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"labels": ["person"]}, "in one window"),  # the text alone is past the row
        ({"labels": [f"label {i}" for i in range(40)]}, "in one row"),  # the text fits, its prompt not
    ],
)
def test_a_boundary_row_past_the_profiles_bound_is_413(
    families: Families, params: dict[str, Any], fragment: str
) -> None:
    server, _ = families
    text = "word " * (MAX_WORDS // 2) if "in one row" in fragment else "word " * (4 * MAX_WORDS)
    body = {"items": [{"text": text}], "params": params}
    response = httpx.post(f"{server.url}/v1/extract/{GLINER2_BOUNDARY}", json=body, timeout=60)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INPUT_TOO_LONG" and fragment in detail["message"], detail
    ok = {"items": [{"text": "Paris is nice."}], "params": {"labels": ["city"]}}
    assert httpx.post(f"{server.url}/v1/extract/{GLINER2_BOUNDARY}", json=ok, timeout=60).status_code == 200
