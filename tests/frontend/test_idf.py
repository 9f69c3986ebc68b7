"""Inference-free sparse queries in the frontend: IDF lookup against sentence-transformers'
SparseStaticEmbedding on the same idf.json and tokenizer, with no device involved."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import transformers
from starlette.testclient import TestClient

from sie.catalog import Catalog
from sie.frontend.app import build_app
from sie.frontend.idf import IdfTable, read_idf_table
from sie.frontend.state import FrontendState
from sie.frontend.target import resolve
from sie.frontend.tasks.idf_queries import try_idf_queries
from sie.model_config import parse_model_config
from sie.settings import Settings
from sie.shm.control import ModelState
from tests.frontend.test_app import FakeDevices, error_of
from tests.tiny_models.inference_free_splade import (
    make_inference_free_splade,
    model_yaml_inference_free_splade,
    reference_encoder,
)
from tests.tiny_models.splade import make_splade, model_yaml_splade

DOC_MODEL = "tiny/doc-splade"
PLAIN = "tiny/splade"
QUERIES = [
    "what causes high blood pressure",
    "hi",
    "The quick brown fox jumps over the lazy dog, and the dog does not mind the fox.",
    "blood blood blood pressure",
    "",
]
SHORT = 5  # the `short` profile's runtime.max_seq_length


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("idf")
    return {DOC_MODEL: make_inference_free_splade(root / "doc"), PLAIN: make_splade(root / "plain")}


@pytest.fixture
def devices(folders: dict[str, Path]) -> FakeDevices:
    doc = model_yaml_inference_free_splade(DOC_MODEL, folders[DOC_MODEL])
    doc["profiles"] = {
        "default": {"adapter": "splade"},
        "short": {"adapter": "splade", "adapter_options": {"runtime": {"max_seq_length": SHORT}}},
    }
    del doc["adapter"]
    catalog = Catalog([parse_model_config(doc), parse_model_config(model_yaml_splade(PLAIN, folders[PLAIN]))])
    fake = FakeDevices(catalog)
    fake.states = {slot: ModelState.AVAILABLE for slot in fake.states}  # nothing loaded anywhere
    return fake


@pytest.fixture
def state(devices: FakeDevices) -> FrontendState:
    return FrontendState(settings=Settings(), catalog=devices.catalog, devices=devices)


@pytest.fixture
def client(state: FrontendState) -> Iterator[TestClient]:
    with TestClient(build_app(state), raise_server_exceptions=False) as test_client:
        yield test_client


def encode(client: TestClient, model: str, texts: list[str], **options: Any) -> Any:
    body = {"items": [{"text": t} for t in texts], "params": {"output_types": ["sparse"], "options": options}}
    return client.post(f"/v1/encode/{model}", json=body, headers={"accept": "application/json"})


def sparse_rows(payload: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    rows = [item["sparse"] for item in payload["items"]]
    return [(np.asarray(r["indices"], np.int64), np.asarray(r["values"], np.float32)) for r in rows]


def test_queries_match_sentence_transformers_with_no_device(
    client: TestClient, devices: FakeDevices, folders: dict[str, Path]
) -> None:
    response = encode(client, DOC_MODEL, QUERIES, is_query=True)
    assert response.status_code == 200, response.text
    want = reference_encoder(folders[DOC_MODEL]).encode_query(
        QUERIES, convert_to_tensor=True, convert_to_sparse_tensor=False
    )
    for (indices, values), row in zip(sparse_rows(response.json()), want.numpy(), strict=True):
        np.testing.assert_array_equal(indices, np.flatnonzero(row))
        np.testing.assert_allclose(values, row[indices], rtol=0, atol=1e-4)
    assert response.json()["items"][0]["sparse"]["dims"] == 30522
    assert devices.batches == [] and devices.load_requests == []  # the device was never asked


def test_documents_still_go_to_the_device(client: TestClient, devices: FakeDevices) -> None:
    response = encode(client, DOC_MODEL, QUERIES[:1])
    assert response.status_code == 503 and error_of(response)[0] == "MODEL_LOADING"
    assert devices.load_requests == [devices.catalog.slot(DOC_MODEL)]


def test_a_model_without_idf_json_encodes_queries_on_the_device(state: FrontendState) -> None:
    assert asyncio.run(try_idf_queries(state, resolve(state, PLAIN), QUERIES)) is None
    assert asyncio.run(try_idf_queries(state, resolve(state, DOC_MODEL), QUERIES)) is not None


def test_profile_max_seq_length_truncates_queries_and_documents(
    client: TestClient, state: FrontendState, folders: dict[str, Path]
) -> None:
    folder = folders[DOC_MODEL]
    hf = transformers.AutoTokenizer.from_pretrained(str(folder))
    idf = json.loads((folder / "idf.json").read_text())
    text = QUERIES[2]
    response = encode(client, DOC_MODEL, [text], is_query=True, profile="short")
    assert response.status_code == 200, response.text
    [(indices, values)] = sparse_rows(response.json())
    kept = hf(text, add_special_tokens=False, truncation=True, max_length=SHORT)["input_ids"]
    weights = {i: idf.get(hf.convert_ids_to_tokens(i), 0.0) for i in kept}
    assert dict(zip(indices.tolist(), values.tolist(), strict=True)) == pytest.approx(
        {i: w for i, w in weights.items() if w > 0}
    )
    config = state.catalog.get(DOC_MODEL)
    documents = state.tokenizers.for_profile(config, "short").encode([text])
    want = hf(text, truncation=True, max_length=SHORT)["input_ids"]
    assert documents.input_ids.tolist() == want  # special tokens included in the limit
    assert state.tokenizers.for_profile(config, None).encode([text]).n_tokens > SHORT


def test_idf_table_skips_unknown_tokens_and_non_positive_weights(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    tokenizer = make_tokenizer(folders[DOC_MODEL])
    (tmp_path / "idf.json").write_text(json.dumps({"blood": 2.5, "pressure": 0.0, "no-such-token": 9.0}))
    table = read_idf_table(tmp_path, tokenizer)
    assert isinstance(table, IdfTable) and np.count_nonzero(table.weights) == 1
    blood, pressure = tokenizer.token_to_id("blood"), tokenizer.token_to_id("pressure")
    [(indices, values)] = table.lookup([[pressure, blood, blood, 10**6]])  # repeats count once
    assert indices.tolist() == [blood] and values.tolist() == [2.5]
    assert read_idf_table(tmp_path / "elsewhere", tokenizer) is None
    (tmp_path / "modules.json").write_text("[]")  # one module list for queries and documents alike
    assert read_idf_table(tmp_path, tokenizer) is None
    (tmp_path / "router_config.json").write_text("{}")  # a Router: the query route is the lookup
    assert read_idf_table(tmp_path, tokenizer) is not None
    (tmp_path / "idf.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"idf\.json"):
        read_idf_table(tmp_path, tokenizer)


def make_tokenizer(folder: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json"))
