"""GLiNER2 through the real SIE SDK (`client.extract`): entities, a classification task, and the
SDK's error for a request without labels, against the gliner2 package on the same tiny weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.gpu_proc.test_gliner2_adapter import reference_entities
from tests.integration.families import GLINER2
from tests.integration.server import Server
from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk
from tests.tiny_models.gliner2 import load_reference

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SDK_PYTHON.exists(), reason=f"{SDK_PYTHON} missing (scripts/install.sh --test)"),
]


def test_sdk_extracts_gliner2_entities_and_classes(families: tuple[Server, dict[str, Path]]) -> None:
    pytest.importorskip("gliner2")
    server, folders = families
    texts = ["John Smith lives in New York and works at Springfield Elementary School since 2004", "Hi!"]
    labels = ["person", "location", "organization"]
    classify = {"classification_task": "sentiment", "threshold": 0.0}
    actions = [
        {
            "op": "extract",
            "model": GLINER2,
            "items": [{"text": t} for t in texts],
            "kwargs": {"labels": labels, "options": {"threshold": 0.45}},
        },
        {
            "op": "extract",
            "model": GLINER2,
            "items": {"text": texts[0]},
            "kwargs": {"labels": ["positive", "negative"], "options": classify},
        },
        {"op": "extract", "model": GLINER2, "items": {"text": texts[0]}},
    ]
    spans, classes, no_labels = run_sdk(server.url, actions)
    reference = load_reference(folders[GLINER2])

    want = reference_entities(reference, texts, labels, 0.45)
    assert any(want)
    for result, theirs in zip(ok(spans), want, strict=True):
        got = result["entities"]
        assert [(e["label"], e["start"], e["end"]) for e in got] == [
            (e["label"], e["start"], e["end"]) for e in theirs
        ]
        np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in theirs], atol=1e-4)

    task = {"sentiment": {"labels": ["positive", "negative"], "multi_label": False, "cls_threshold": 0.0}}
    [found] = reference.batch_classify_text(texts[:1], task, threshold=0.0, include_confidence=True)
    [got] = ok(classes)["classifications"]  # one item in: one result out
    assert got["label"] == found["sentiment"]["label"]
    np.testing.assert_allclose(got["score"], found["sentiment"]["confidence"], atol=1e-4)

    assert not no_labels["ok"] and no_labels["error"]["status_code"] == 400
