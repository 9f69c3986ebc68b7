"""Inference-free sparse retrieval end to end: SIE's own YAML for OpenSearch's doc-v3-distill, copied
unchanged, served by a real server whose HF cache holds a tiny random-weight model at the pinned
revision. Queries are IDF lookups in the frontend (answered before the model was ever loaded);
documents run the masked LM on the device. Both against sentence-transformers' published recipe.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from tests.integration.hf_cache import snapshot_dir
from tests.integration.server import Server, wait_until
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, encode
from tests.shared_catalog_files import SIE_CATALOG
from tests.tiny_models.inference_free_splade import make_inference_free_splade, reference_encoder

pytestmark = pytest.mark.slow

MODEL = "opensearch-project/opensearch-neural-sparse-encoding-doc-v3-distill"
FILE = "opensearch-project__opensearch-neural-sparse-encoding-doc-v3-distill.yaml"
QUERIES = ["what causes high blood pressure", "hi", "blood blood pressure"]
DOCUMENTS = [
    "Aspirin lowers the risk of stroke in patients with atrial fibrillation, a large trial found.",
    "The quick brown fox jumps over the lazy dog.",
]


@dataclass(frozen=True)
class Lab:
    server: Server
    weights: Path


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    if not (SIE_CATALOG / FILE).is_file():
        pytest.skip("no SIE catalog data")
    sie = yaml.safe_load((SIE_CATALOG / FILE).read_text())
    snapshot = snapshot_dir(watched_server.hub, sie["hf_id"], sie["hf_revision"])
    # DistilBERT, as the real checkpoint is; its SpladePooling says log1p_relu, as doc-v3 models do.
    weights = make_inference_free_splade(snapshot, is_distilbert=True)
    shutil.copy(SIE_CATALOG / FILE, watched_server.models / FILE)  # SIE's file as it is
    watched_server.wait_listed(MODEL)  # and not loaded: queries must need no model
    yield Lab(watched_server.server, weights)


def sparse_of(texts: list[str], *, is_query: bool, as_json: bool, url: str) -> httpx.Response:
    params = {"output_types": ["sparse"], "options": {"is_query": is_query}}
    body = {"items": [{"text": t} for t in texts], "params": params}
    return encode(url, MODEL, body, as_json=as_json)


def assert_matches(payload: dict[str, Any], want: np.ndarray) -> None:
    for item, row in zip(payload["items"], want, strict=True):
        entry = item["sparse"]
        indices = np.asarray(entry["indices"])
        assert entry["dims"] == 30522
        np.testing.assert_array_equal(indices, np.flatnonzero(row))
        np.testing.assert_allclose(np.asarray(entry["values"], np.float32), row[indices], rtol=0, atol=1e-4)


def model_state(lab: Lab) -> str:
    response = httpx.get(f"{lab.server.url}/v1/models/{MODEL}", timeout=10)
    assert response.status_code == 200, response.text
    return str(response.json()["state"])


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_queries_are_idf_lookups_with_no_model_loaded(lab: Lab, as_json: bool) -> None:
    if model_state(lab) != "available":
        pytest.skip("a document test loaded the model first")
    response = sparse_of(QUERIES, is_query=True, as_json=as_json, url=lab.server.url)
    assert response.status_code == 200, response.text
    want = reference_encoder(lab.weights).encode_query(
        QUERIES, convert_to_tensor=True, convert_to_sparse_tensor=False
    )
    payload = decode(response)
    assert_matches(payload, want.numpy())
    assert payload["usage"]["input_tokens"] == 5 + 1 + 3  # no special tokens: IDF weighs the words alone
    assert model_state(lab) == "available"  # the query never asked the device for the model


def test_documents_run_the_masked_lm_on_the_device(lab: Lab) -> None:
    def served() -> httpx.Response | None:
        response = sparse_of(DOCUMENTS, is_query=False, as_json=True, url=lab.server.url)
        if response.status_code == 200:
            return response
        assert response.status_code == 503 and response.json()["detail"]["code"] == "MODEL_LOADING"
        return None

    response = wait_until(served, 120, "the doc encoder loads and serves", interval_s=0.2)
    reference = reference_encoder(lab.weights)
    want = reference.encode_document(DOCUMENTS, convert_to_tensor=True, convert_to_sparse_tensor=False)
    assert_matches(decode(response), want.numpy())
    # Once loaded, queries are still lookups, the same as before.
    queries = sparse_of(QUERIES, is_query=True, as_json=True, url=lab.server.url)
    assert queries.status_code == 200, queries.text
    want = reference.encode_query(QUERIES, convert_to_tensor=True, convert_to_sparse_tensor=False)
    assert_matches(decode(queries), want.numpy())


def test_sdk_encode_reads_sparse_queries_and_documents(lab: Lab) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    texts = {True: QUERIES[0], False: DOCUMENTS[0]}
    actions = [
        {
            "op": "encode",
            "model": MODEL,
            "items": {"text": t},
            "kwargs": {"output_types": ["sparse"], "is_query": q},
        }
        for q, t in texts.items()
    ]
    # The SDK waits out MODEL_LOADING (a 503) on the document by itself.
    entries = run_sdk(lab.server.url, actions, timeout_s=180)
    query, document = (ok(entry)["sparse"] for entry in entries)
    reference = reference_encoder(lab.weights)
    kw: dict[str, Any] = {"convert_to_tensor": True, "convert_to_sparse_tensor": False}
    for got, want in [
        (query, reference.encode_query([texts[True]], **kw)[0].numpy()),
        (document, reference.encode_document([texts[False]], **kw)[0].numpy()),
    ]:
        indices = np.asarray(got["indices"]["values"])
        np.testing.assert_array_equal(indices, np.flatnonzero(want))
        np.testing.assert_allclose(np.asarray(got["values"]["values"]), want[indices], rtol=0, atol=1e-4)
