"""A tiny GLiNER union: two tiny random-weight GLiNER span models (tests/tiny_models/gliner.py), the
first a DeBERTa, the second a BERT whose spans are merged when adjacent, as SIE's PII redaction
union pairs urchade/gliner_multi_pii-v1 with numind/NuNER_Zero. Windows are a few words long, so
short test texts are read in several."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.tiny_models.gliner import make_gliner

FIRST, SECOND = "first", "second"
WINDOW_WORDS = 12
WINDOW_OVERLAP = 4
SCORE_FLOOR = 0.6
DEFAULT_LABELS = ["person", "location", "organization"]
RUNTIME: dict[str, Any] = {
    "score_floor": SCORE_FLOOR,
    "window_words": WINDOW_WORDS,
    "window_overlap": WINDOW_OVERLAP,
    "propagate_label": "person",
    "name_min_letters": 3,
    "default_labels": DEFAULT_LABELS,
}
SECOND_OPTIONS = {"merge_adjacent_entities": True}


def make_gliner_union(folder: Path) -> Path:
    """Write the two members into folder/first and folder/second; return `folder`."""
    make_gliner(folder / FIRST, seed=0, arch="deberta")
    make_gliner(folder / SECOND, seed=1, arch="bert")
    return folder


def model_yaml_gliner_union(sie_id: str, folder: Path) -> dict[str, Any]:
    members = [{"path": str(folder / SECOND), "options": SECOND_OPTIONS}]
    options = {"loadtime": {"members": members}, "runtime": copy.deepcopy(RUNTIME)}  # callers may edit it
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder / FIRST)},
        "tasks": {"extract": {}},
        "profiles": {"default": {"adapter": "gliner_union", "adapter_options": options}},
    }
