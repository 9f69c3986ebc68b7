"""The real server on the real MiniLM weights, over HTTP, against plain transformers."""

from __future__ import annotations

import numpy as np
import pytest

from tests.integration.reference import MINILM, minilm_dir, reference_embeddings, token_count
from tests.integration.server import Server
from tests.integration.texts import assert_close, random_texts
from tests.integration.wire import decode, dense_matrix, encode, sie_quantized

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_matches_reference_and_keeps_order(minilm_server: Server, as_json: bool) -> None:
    texts = random_texts(64, 1, 120, seed=1)
    body = {"items": [{"id": f"doc-{i}", "text": t} for i, t in enumerate(texts)]}
    response = encode(minilm_server.url, MINILM, body, as_json=as_json)
    assert response.status_code == 200, response.text
    payload = decode(response)
    assert payload["model"] == MINILM
    assert [item["id"] for item in payload["items"]] == [f"doc-{i}" for i in range(64)]
    assert_close(dense_matrix(payload), reference_embeddings(texts, minilm_dir()))
    assert payload["usage"]["input_tokens"] == token_count(texts, minilm_dir())
    assert payload["items"][0]["dense"]["dims"] == 384 and payload["items"][0]["dense"]["dtype"] == "float32"


def test_item_alone_equals_item_in_mixed_batch(minilm_server: Server) -> None:
    texts = random_texts(64, 1, 120, seed=2)
    batch = dense_matrix(
        decode(encode(minilm_server.url, MINILM, {"items": [{"text": t} for t in texts]}, as_json=False))
    )
    for index in (0, 17, 63):
        alone = dense_matrix(
            decode(encode(minilm_server.url, MINILM, {"items": [{"text": texts[index]}]}, as_json=False))
        )
        np.testing.assert_allclose(alone[0], batch[index], atol=1e-5)


def test_golden_values_and_headers(minilm_server: Server) -> None:
    response = encode(minilm_server.url, MINILM, {"items": [{"text": "A man is eating food."}]}, as_json=True)
    payload = response.json()
    values = np.asarray(payload["items"][0]["dense"]["values"])
    np.testing.assert_allclose(values[:5], [0.0332, 0.0044, -0.0063, 0.0484, -0.1387], atol=1e-4)
    assert abs(np.linalg.norm(values) - 1) < 1e-5
    assert "id" not in payload["items"][0]
    for header in (
        "x-sie-server-version",
        "x-queue-time",
        "x-tokenization-time",
        "x-inference-time",
        "x-total-time",
    ):
        assert header in response.headers
    assert set(payload["timing"]) >= {"total_ms", "queue_ms", "tokenization_ms", "inference_ms"}


def test_hello_matches_real_sie(minilm_server: Server) -> None:
    payload = decode(encode(minilm_server.url, MINILM, {"items": [{"text": "Hello"}]}, as_json=False))
    values = payload["items"][0]["dense"]["values"]
    assert values.dtype == np.float32
    np.testing.assert_allclose(
        values[:5], [-0.06277182, 0.05495885, 0.05216483, 0.08579001, -0.08274892], atol=1e-6
    )


@pytest.mark.parametrize("dtype", ["float16", "int8", "uint8", "binary", "ubinary"])
def test_output_dtypes_over_http(minilm_server: Server, dtype: str) -> None:
    texts = random_texts(3, 1, 120, seed=3)
    items = {"items": [{"text": t} for t in texts]}
    plain = dense_matrix(decode(encode(minilm_server.url, MINILM, items, as_json=False)))
    body = {"items": [{"text": t} for t in texts], "params": {"output_dtype": dtype}}
    as_msgpack = decode(encode(minilm_server.url, MINILM, body, as_json=False))
    as_json = encode(minilm_server.url, MINILM, body, as_json=True).json()
    reference = reference_embeddings(texts, minilm_dir())
    got = np.stack([item["dense"]["values"] for item in as_msgpack["items"]])
    for i, item in enumerate(as_msgpack["items"]):
        assert item["dense"]["dims"] == 384
        assert item["dense"]["dtype"] == ("binary" if dtype == "ubinary" else dtype)
        np.testing.assert_array_equal(got[i], np.asarray(as_json["items"][i]["dense"]["values"], got.dtype))
    if dtype == "float16":
        assert got.dtype == np.float16
        np.testing.assert_allclose(got.astype(np.float32), reference, atol=1e-3)
        return
    # Exactly SIE's quantization of the float32 vectors this server returns for the same texts.
    want = sie_quantized(plain, dtype)
    assert got.dtype == want.dtype and got.shape == want.shape == (3, 48 if "binary" in dtype else 384)
    np.testing.assert_array_equal(got, want)
    # Within one step of the quantized reference vectors (values on a rounding boundary may differ).
    near = sie_quantized(reference, dtype).astype(np.int32)
    if "binary" in dtype:
        assert (np.unpackbits(got, axis=1) != np.unpackbits(near.astype(np.uint8), axis=1)).sum() <= 2
    else:
        assert np.abs(got.astype(np.int32) - near).max() <= 1


def test_query_instruction_changes_text(minilm_server: Server) -> None:
    body = {
        "items": [{"text": "cells"}],
        "params": {"instruction": "Represent the query:", "options": {"is_query": True}},
    }
    got = dense_matrix(encode(minilm_server.url, MINILM, body, as_json=True).json())
    assert_close(got, reference_embeddings(["Represent the query: cells"], minilm_dir()))


def test_truncates_long_text_to_max_length(minilm_server: Server) -> None:
    text = "protein " * 50_000
    payload = encode(minilm_server.url, MINILM, {"items": [{"text": text}]}, as_json=True).json()
    assert payload["usage"]["input_tokens"] == 256
    assert_close(dense_matrix(payload), reference_embeddings([text[:5000]], minilm_dir()))
