"""SIE's GLiNER2 YAML files read here, and how a request and a profile's options pick the task."""

from __future__ import annotations

from typing import Any

import pytest

from sie.catalog import load_catalog
from sie.errors import InvalidInput
from sie.frontend.tasks.extract import ExtractJob
from sie.frontend.tasks.extract_gliner2 import plan
from tests.shared_catalog_files import SIE_CATALOG

SERVED = ["fastino/gliner2-base-v1", "fastino/gliner2-large-v1", "fastino/gliguard-LLMGuardrails-300M"]
# SIE's entity adapter: GLiNER2.5 boundary checkpoints, and a span one (its PII filter).
ENTITIES = [
    "fastino/gliner2.5-base-v1",
    "fastino/gliner2.5-small-v1",
    "fastino/gliner2-privacy-filter-PII-multi",
]
# SIE's Decide adapter: typed decisions (windows in tokens: 512 for DeBERTa-v3-large, else 2048).
DECIDE = {
    "fastino/GLiNER2.5-Decide": 512,
    "fastino/GLiNER2.5-Decide-1B": 2048,
    "fastino/GLiNER2.5-multi-Decide": 2048,
}
GUARD = {"classification_task": "prompt_safety", "default_labels": ["safe", "unsafe"], "multi_label": False}


def test_sies_gliner2_files_are_served_or_refused_by_name() -> None:
    if not SIE_CATALOG.is_dir():
        pytest.skip("no SIE catalog data")
    catalog = load_catalog(SIE_CATALOG)
    for model_id in SERVED:
        assert catalog.get(model_id).profile().adapter == "gliner2"
    guard = catalog.get("fastino/gliguard-LLMGuardrails-300M").profile().adapter_options.loadtime
    assert guard == {**GUARD, "positive_label": "unsafe"}
    for model_id in ENTITIES:
        profile = catalog.get(model_id).profile()
        assert profile.adapter == "gliner2"
        assert profile.adapter_options.loadtime["max_prompt_tokens"] == 2048
    for model_id, window in DECIDE.items():
        config = catalog.get(model_id)
        assert config.profile().adapter == "gliner2_decide" and config.max_sequence_length == window
        assert config.profile().adapter_options.loadtime == {}  # cuda_graphs is SIE's engine tuning


def job(
    labels: list[str] | None = None,
    options: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
) -> ExtractJob:
    return ExtractJob(texts=["hi"], labels=labels, options=options or {}, output_schema=output_schema)


def test_the_task_follows_sies_adapter() -> None:
    assert plan(job(labels=["person"]), {}).schema.kind == "entities"
    guard = plan(job(), GUARD).schema  # a guard classifies with its own task and labels
    assert (guard.kind, guard.name, guard.fields) == ("classification", "prompt_safety", ("safe", "unsafe"))
    asked = plan(job(labels=["toxic", "fine"]), GUARD).schema
    assert asked.fields == ("toxic", "fine")
    chosen = plan(job(labels=["a", "b"], options={"classification_task": "topic"}), {}).schema
    assert (chosen.kind, chosen.name) == ("classification", "topic")
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    assert plan(job(output_schema=schema), {}).schema.kind == "structure"


@pytest.mark.parametrize(
    ("request_job", "loadtime", "fragment"),
    [
        (job(), {}, "requires labels"),
        (job(labels=[]), GUARD, "requires labels"),
        (job(labels=["a", " a"]), {}, "unique"),
        (job(labels=["a"], options={"threshold": -0.1}), {}, "threshold"),
        (job(labels=["a"], options={"threshold": float("nan")}), {}, "threshold"),
        (job(labels=["a"], options={"threshold": 10**400}), {}, "threshold"),  # too large for a float
        (job(labels=["a"], options={"classification_task": " "}), {}, "classification_task"),
        (job(labels=["a", "b"], options={"positive_label": "c"}), GUARD, "positive_label"),
        (
            job(output_schema={"type": "object", "properties": {"a": {"type": "string"}}}),
            GUARD,
            "classification_task",
        ),
    ],
)
def test_bad_requests_are_refused(
    request_job: ExtractJob, loadtime: dict[str, object], fragment: str
) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        plan(request_job, loadtime)
