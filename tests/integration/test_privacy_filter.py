"""OpenAI's privacy filter end to end: SIE's own YAML for openai/privacy-filter with a tiny random
model in a Hugging Face cache under SIE's id and pinned revision, and the same weights under our
format with small windows, so that long texts are read in several windows.

Answers are checked against tests.tiny_models.privacy_filter.Reference: one transformers forward
over the whole text, and the model card's constrained Viterbi written plainly.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.integration.hf_cache import snapshot_dir
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, post
from tests.tiny_models.privacy_filter import (
    _CORPUS,
    Reference,
    make_privacy_filter,
    model_yaml_privacy_filter,
)

pytestmark = pytest.mark.slow

MODEL = "openai/privacy-filter"
WINDOWED = "test/privacy-filter-windows"
# SIE 0.10.1's file, but float32 for bfloat16 so that the float32 reference holds to 1e-4.
SIE_YAML: dict[str, Any] = {
    "sie_id": MODEL,
    "hf_id": MODEL,
    "hf_revision": "7ffa9a043d54d1be65afb281eddf0ffbe629385b",
    "inputs": {"text": True, "image": False, "audio": False, "video": False},
    "tasks": {"encode": None, "score": None, "extract": {}},
    "max_sequence_length": 128000,
    "profiles": {
        "default": {
            "max_batch_tokens": 128000,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.privacy_filter.adapter:PrivacyFilterAdapter",
            "adapter_options": {"loadtime": {}, "runtime": {}},
        }
    },
}
TEXTS = [*_CORPUS, "", "  ", " ".join(_CORPUS) * 2]


@dataclass(frozen=True)
class Lab:
    server: Server
    reference: Reference


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, watched_server: WatchedServer) -> Iterator[Lab]:
    snapshot = snapshot_dir(watched_server.hub, MODEL, SIE_YAML["hf_revision"])
    make_privacy_filter(snapshot, seed=5)
    ours = shutil.copytree(snapshot, tmp_path_factory.mktemp("privacy") / "ours")
    windowed = model_yaml_privacy_filter(WINDOWED, ours, window_tokens=40)
    windowed["max_sequence_length"] = 600
    for raw in (SIE_YAML, windowed):
        watched_server.add(raw)
        watched_server.wait_serving(f"/v1/extract/{raw['sie_id']}", {"items": [{"text": "Call Ada"}]})
    yield Lab(watched_server.server, Reference(snapshot))


def extract(
    lab: Lab,
    texts: list[str],
    params: dict[str, Any] | None = None,
    *,
    model: str = MODEL,
    as_json: bool = True,
) -> Any:
    body = {"items": [{"id": f"t{i}", "text": text} for i, text in enumerate(texts)], "params": params or {}}
    return post(lab.server.url, f"/v1/extract/{model}", body, as_json=as_json)


def assert_same(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert [(e["label"], e["start"], e["end"], e["text"]) for e in got] == [
        (e["label"], e["start"], e["end"], e["text"]) for e in want
    ]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=1e-4)


def entities_of(response: Any) -> list[list[dict[str, Any]]]:
    assert response.status_code == 200, response.text
    return [item["entities"] for item in decode(response)["items"]]


@pytest.mark.parametrize("model", [MODEL, WINDOWED])
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_spans_match_the_reference(lab: Lab, model: str, as_json: bool) -> None:
    found = entities_of(extract(lab, TEXTS, model=model, as_json=as_json))
    assert sum(len(spans) for spans in found) > 20
    assert len({e["label"] for spans in found for e in spans}) >= 6  # most categories occur
    for got, text in zip(found, TEXTS, strict=True):
        assert_same(got, lab.reference.extract(text))
        assert all(text[e["start"] : e["end"]] == e["text"] for e in got)


def test_labels_keep_only_those_categories(lab: Lab) -> None:
    wanted = ["private_person", "private_email"]
    found = entities_of(extract(lab, TEXTS, {"labels": wanted}))
    for got, text in zip(found, TEXTS, strict=True):
        assert_same(got, lab.reference.extract(text, labels=wanted))
    # No labels, or an empty list, is every category.
    every = entities_of(extract(lab, TEXTS, {"labels": []}))
    for got, text in zip(every, TEXTS, strict=True):
        assert_same(got, lab.reference.extract(text))


@pytest.mark.parametrize("bias", [-3.0, 2.5])
def test_span_entry_bias_shifts_the_calibrated_entry(lab: Lab, bias: float) -> None:
    found = entities_of(extract(lab, TEXTS, {"options": {"span_entry_bias": bias}}))
    for got, text in zip(found, TEXTS, strict=True):
        assert_same(got, lab.reference.extract(text, entry_bias=bias))
    plain = entities_of(extract(lab, TEXTS))
    assert sum(map(len, found)) != sum(map(len, plain))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"labels": ["private_person", "pokemon"]}, "pokemon"),
        ({"options": {"span_entry_bias": 11}}, "span_entry_bias"),
        ({"options": {"span_entry_bias": "high"}}, "span_entry_bias"),
        ({"options": {"span_entry_bias": True}}, "span_entry_bias"),
        ({"options": {"span_entry_bias": 10**400}}, "span_entry_bias"),
        ({"instruction": "find names"}, "instruction"),
        ({"output_schema": {"name": "str"}}, "output_schema"),
    ],
)
def test_bad_requests_are_400_and_the_model_keeps_serving(
    lab: Lab, params: dict[str, Any], message: str
) -> None:
    response = extract(lab, TEXTS[:2], params)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT"
    assert message in detail["message"]
    assert_same(entities_of(extract(lab, TEXTS[:1]))[0], lab.reference.extract(TEXTS[0]))


def test_a_text_over_the_models_length_is_413(lab: Lab) -> None:
    response = extract(lab, ["fine", "word " * 700], model=WINDOWED)
    assert response.status_code == 413, response.text
    assert response.json()["detail"]["code"] == "INPUT_TOO_LONG"


def test_only_empty_texts_need_no_forward(lab: Lab) -> None:
    assert entities_of(extract(lab, ["", ""])) == [[], []]


def test_the_sdk_extracts_with_labels(lab: Lab) -> None:
    """`client.extract(model, items, labels=...)` of the real sie-sdk."""
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    wanted = ["private_person", "private_phone", "secret"]
    items = [{"text": text} for text in _CORPUS]
    (extracted,) = run_sdk(
        lab.server.url, [{"op": "extract", "model": MODEL, "items": items, "kwargs": {"labels": wanted}}]
    )
    results = ok(extracted)
    assert sum(len(result["entities"]) for result in results) > 0
    for result, text in zip(results, _CORPUS, strict=True):
        assert_same(result["entities"], lab.reference.extract(text, labels=wanted))


def test_a_long_request_decodes_off_the_event_loop_to_the_same_spans(lab: Lab) -> None:
    long_text = " ".join(_CORPUS) * 15  # over INLINE_DECODE_TOKENS: Viterbi runs on a worker thread
    (got,) = entities_of(extract(lab, [long_text]))
    assert_same(got, lab.reference.extract(long_text))
