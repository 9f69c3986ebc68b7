"""Fuzzing each family's own request handling on the shared server of tiny models: random labels,
options, output schemas, instructions, metadata and item texts of every JSON type, sent to every
text family's route. Each family parses its own options (thresholds, label lists, relation labels,
entity spans, decision schemas), so a value of a type its parser did not expect must still be a
4xx in the contract's shape, never a 5xx, and the server serves afterwards. Twelve bodies per
route (about 200 requests); `SIE_FUZZ_PER_ROUTE=80` runs a longer search.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.families import (
    COLBERT,
    GLICLASS,
    GLIFORMER,
    GLINER,
    GLINER2,
    GLINER2_DECIDE,
    GLINER_BI,
    GLINER_RELEX,
    GLINER_UNION,
    GLIREL,
    HYBRID,
    LAYA,
    NER,
    NLI,
    RERANKER,
    SPLADE,
)
from tests.integration.server import Server
from tests.integration.test_fuzz import FUZZ, check_response, still_serves

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
ROUTES = [
    *(f"/v1/extract/{model}" for model in (NER, GLINER, GLICLASS, GLINER2, GLINER_BI, GLINER_RELEX)),
    *(f"/v1/extract/{model}" for model in (GLINER_UNION, GLIREL, GLIFORMER, LAYA, NLI, GLINER2_DECIDE)),
    *(f"/v1/encode/{model}" for model in (SPLADE, COLBERT, HYBRID, GLIFORMER)),
    *(f"/v1/score/{model}" for model in (RERANKER, COLBERT)),
]
# Option names the families read; each gets values of every type.
OPTION_NAMES = [
    "threshold", "flat_ner", "multi_label", "top_k", "classification_type", "relation_labels",
    "relation_threshold", "merge_adjacent_entities", "hypothesis_template", "max_len", "profile",
    "score_floor", "window_words", "window_overlap", "propagate_label", "default_labels", "task",
    "include_spans", "include_confidence", "max_length", "is_query", "muvera", "lora",
    "label_groups", "classification_task", "overflow_policy", "group_encoding",
]  # fmt: skip

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)  # NaN is test_fuzz.py's
    | st.text(max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
labels = st.lists(st.text(min_size=1, max_size=10), min_size=1, max_size=4) | values
position = values | st.integers(0, 40)
entity = st.fixed_dictionaries({"start": position, "end": position, "label": values | st.text(max_size=8)})
item = st.fixed_dictionaries(
    {"text": st.text(max_size=60) | values},
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"entities": st.lists(entity, max_size=3) | values,
                                                        "state": values}),
        "id": values,
        "is_query": values,
    },
)  # fmt: skip
schema = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["choice", "score", "noul", "bool", "text", ""]) | values,
            "instructions": values,
            "criteria": values,
            "labels": values,
        },
    )
    | values,
    max_size=3,
)
params = st.fixed_dictionaries(
    {},
    optional={
        "labels": labels,
        "output_schema": schema | values,
        "instruction": values,
        "options": st.dictionaries(st.sampled_from(OPTION_NAMES), values, max_size=4) | values,
        "output_types": values,
    },
)
bodies = st.fixed_dictionaries(
    {"items": st.lists(item, min_size=1, max_size=3)},
    optional={"params": params, "query": item, "instruction": values},
)


def test_family_parameters_are_4xx_or_served_never_5xx(families: Families) -> None:
    server, _ = families

    @settings(FUZZ, max_examples=len(ROUTES) * int(os.environ.get("SIE_FUZZ_PER_ROUTE", "12")))
    @given(path=st.sampled_from(ROUTES), body=bodies)
    def run(path: str, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        response = httpx.post(
            server.url + path,
            content=raw,
            headers={"content-type": "application/json", "accept": "application/json"},
            timeout=60,
        )
        check_response(path, response)

    run()
    still_serves(server)
