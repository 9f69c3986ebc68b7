"""SIE's context pruner (sugiv/stablebridge-pruner-highlighter) from its own YAML, end to end.

A real server reads SIE's file for the model, with the weights in a Hugging Face cache as SIE names
them: a tiny random XLM-R cross-encoder as BAAI/bge-reranker-v2-m3 at the pinned revision, and a
random keep head as the pruner repository's `best.pt`. Its answers are checked against the
reference of tests.tiny_models.context_pruner (SIE's recipe on transformers and torch alone).
"""

from __future__ import annotations

import copy
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.hf_cache import snapshot_dir
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, post
from tests.tiny_models.context_pruner import HEAD_FILE, HIDDEN, INTERMEDIATE, Reference, save_head
from tests.tiny_models.cross_encoder import make_cross_encoder

pytestmark = pytest.mark.slow

PRUNER = "sugiv/stablebridge-pruner-highlighter"
# SIE 0.10.1's file for it, as shipped but for the head's two sizes, which are the tiny model's here,
# and float32 for bfloat16, so that the reference in float32 can be held to 1e-4.
SIE_YAML: dict[str, Any] = {
    "sie_id": PRUNER,
    "hf_id": "BAAI/bge-reranker-v2-m3",
    "hf_revision": "953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e",
    "inputs": {"text": True, "image": False, "audio": False, "video": False},
    "tasks": {"encode": None, "score": {}, "extract": {}},
    "max_sequence_length": 8192,
    "profiles": {
        "default": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.stablebridge_pruner:StablebridgePrunerAdapter",
            "adapter_options": {
                "loadtime": {
                    "pruning_head_path": PRUNER,
                    "pruning_head_file": "best.pt",
                    "hidden_size": HIDDEN,
                    "intermediate_size": INTERMEDIATE,
                    "dropout": 0.2,
                },
                "runtime": {"prune_threshold": 0.6, "highlight_threshold": 0.9},
            },
        },
        "aggressive": {
            "extends": "default",
            "adapter_options": {"runtime": {"prune_threshold": 0.4, "highlight_threshold": 0.8}},
        },
        "conservative": {
            "extends": "default",
            "adapter_options": {"runtime": {"prune_threshold": 0.7, "highlight_threshold": 0.95}},
        },
    },
}
QUERY = "how long do cats sleep"
DOCS = [
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed  higher on Friday; bonds fell.",
    "cats",
    "Deep [SEP] sleep",  # a passage that spells out a special token: that token is no span
    "A cat's sleep is light: its ears keep turning towards sounds, even in deep sleep. " * 3,
]


@dataclass(frozen=True)
class Lab:
    server: Server
    reference: Reference


def cached(hub: Path, hf_id: str, revision: str) -> Path:
    """An empty snapshot folder of `hf_id` at `revision` in the cache, its main branch pointing at it."""
    snapshot = snapshot_dir(hub, hf_id, revision)
    snapshot.mkdir(parents=True)
    return snapshot


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    hub = watched_server.hub
    reranker = cached(hub, SIE_YAML["hf_id"], SIE_YAML["hf_revision"])
    shutil.rmtree(reranker)
    make_cross_encoder(reranker, seed=6, arch="xlmr")
    save_head(cached(hub, PRUNER, "1" * 40) / HEAD_FILE)
    watched_server.add(SIE_YAML)
    watched_server.wait_serving(
        f"/v1/score/{PRUNER}", {"query": {"text": QUERY}, "items": [{"text": DOCS[0]}]}
    )
    yield Lab(watched_server.server, Reference(reranker))


def extract(lab: Lab, params: dict[str, Any], *, as_json: bool = True, docs: list[str] = DOCS) -> Any:
    body = {"items": [{"id": f"d{i}", "text": doc} for i, doc in enumerate(docs)], "params": params}
    return post(lab.server.url, f"/v1/extract/{PRUNER}", body, as_json=as_json)


def assert_entities(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    got_summary, *got_spans = got
    want_summary, *want_spans = want
    assert [(e["label"], e["start"], e["end"], e["text"]) for e in got_spans] == [
        (e["label"], e["start"], e["end"], e["text"]) for e in want_spans
    ]
    np.testing.assert_allclose([e["score"] for e in got_spans], [e["score"] for e in want_spans], atol=1e-4)
    assert (got_summary["label"], got_summary["start"], got_summary["end"]) == ("summary", None, None)
    assert got_summary["score"] == pytest.approx(want_summary["score"], abs=1e-4)
    pattern = r"rerank=(\S+) (compression=\S+ kept=\d+/\d+)"
    got_text, want_text = (
        re.fullmatch(pattern, got_summary["text"]),
        re.fullmatch(pattern, want_summary["text"]),
    )
    assert got_text and want_text, (got_summary, want_summary)
    assert float(got_text[1]) == pytest.approx(float(want_text[1]), abs=2e-4)
    assert got_text[2] == want_text[2]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_spans_match_sies_recipe(lab: Lab, as_json: bool) -> None:
    response = extract(lab, {"instruction": QUERY}, as_json=as_json)
    assert response.status_code == 200, response.text
    items = decode(response)["items"]
    want = lab.reference.extract(QUERY, DOCS)
    for item, expected, i in zip(items, want, range(len(DOCS)), strict=True):
        assert item["id"] == f"d{i}"
        assert_entities(item["entities"], expected)
        assert item["relations"] == item["classifications"] == item["objects"] == [] and item["data"] == {}
    labels = {e["label"] for item in items for e in item["entities"]}
    assert labels == {"summary", "pruned", "kept", "highlight"}  # every label is met, so each is checked


@pytest.mark.parametrize(
    ("options", "prune", "highlight"),
    [
        ({"profile": "aggressive"}, 0.4, 0.8),
        ({"profile": "conservative"}, 0.7, 0.95),
        ({"prune_threshold": 0.5}, 0.5, 0.9),
        ({"profile": "aggressive", "highlight_threshold": 0.99}, 0.4, 0.99),
    ],
)
def test_thresholds_come_from_the_profile_and_the_request(
    lab: Lab, options: dict[str, Any], prune: float, highlight: float
) -> None:
    response = extract(lab, {"instruction": QUERY, "options": options})
    assert response.status_code == 200, response.text
    want = lab.reference.extract(QUERY, DOCS, prune, highlight)
    for item, expected in zip(decode(response)["items"], want, strict=True):
        assert_entities(item["entities"], expected)


def test_without_an_instruction_the_query_is_empty(lab: Lab) -> None:
    response = extract(lab, {})
    assert response.status_code == 200, response.text
    for item, expected in zip(decode(response)["items"], lab.reference.extract("", DOCS), strict=True):
        assert_entities(item["entities"], expected)


def test_the_sdk_extracts_and_scores(lab: Lab) -> None:
    """`client.extract(model, items, instruction=..., options=...)` and `client.score` of sie-sdk."""
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    items = [{"text": doc} for doc in DOCS]
    kwargs = {"instruction": QUERY, "options": {"profile": "aggressive"}}
    actions = [
        {"op": "extract", "model": PRUNER, "items": items, "kwargs": kwargs},
        {"op": "score", "model": PRUNER, "query": {"text": QUERY}, "items": items},
    ]
    extracted, scored = run_sdk(lab.server.url, actions)
    for result, expected in zip(ok(extracted), lab.reference.extract(QUERY, DOCS, 0.4, 0.8), strict=True):
        assert_entities(result["entities"], expected)
    ranked = ok(scored)
    ranked = ranked["scores"] if isinstance(ranked, dict) else ranked
    got = {int(str(s["item_id"]).rsplit("-", 1)[-1]): s["score"] for s in ranked}
    np.testing.assert_allclose(
        [got[i] for i in range(len(DOCS))], lab.reference.scores(QUERY, DOCS), atol=1e-4
    )


def test_score_ranks_by_the_rerankers_sigmoid(lab: Lab) -> None:
    body = {"query": {"text": QUERY}, "items": [{"id": f"d{i}", "text": doc} for i, doc in enumerate(DOCS)]}
    response = post(lab.server.url, f"/v1/score/{PRUNER}", body, as_json=True)
    assert response.status_code == 200, response.text
    got = {s["item_id"]: s["score"] for s in decode(response)["scores"]}
    want = lab.reference.scores(QUERY, DOCS)
    np.testing.assert_allclose([got[f"d{i}"] for i in range(len(DOCS))], want, atol=1e-4)
    instructed = post(lab.server.url, f"/v1/score/{PRUNER}", {**body, "instruction": "Find:"}, as_json=True)
    got = {s["item_id"]: s["score"] for s in decode(instructed)["scores"]}
    want = lab.reference.scores(f"Find: {QUERY}", DOCS)  # SIE puts the instruction before the query
    np.testing.assert_allclose([got[f"d{i}"] for i in range(len(DOCS))], want, atol=1e-4)


@pytest.mark.parametrize(
    "options",
    [
        {"prune_threshold": "high"},
        {"highlight_threshold": 1.5},
        {"prune_threshold": True},
        {"profile": "nope"},
    ],
)
def test_bad_options_are_400s_and_the_model_keeps_serving(lab: Lab, options: dict[str, Any]) -> None:
    response = extract(lab, {"instruction": QUERY, "options": options})
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT"
    assert extract(lab, {"instruction": QUERY}, docs=DOCS[:1]).status_code == 200


def test_the_models_listing_shows_both_tasks_and_all_profiles(lab: Lab) -> None:
    import httpx

    model = httpx.get(f"{lab.server.url}/v1/models/{PRUNER}", timeout=10).json()
    assert (model["supported"], model["loaded"]) == (True, True)
    assert {"score", "json"} <= set(model["outputs"])
    assert set(model["profiles"]) == {"default", "aggressive", "conservative"}
    assert (
        copy.deepcopy(SIE_YAML)["profiles"]["default"]["adapter_options"]["runtime"]["prune_threshold"] == 0.6
    )
