from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import msgpack  # type: ignore[import-untyped]
import numpy as np
import pytest

from sie.frontend.postprocess import apply_output_dtype
from sie.frontend.render import (
    Timing,
    dense_column,
    multivector_column,
    render_encode,
    render_error,
    render_openai_embeddings,
    render_openai_error,
    sparse_column,
    timing_headers,
)

# The real SDK's decoder, from the .venv-sdk that `scripts/install.sh --test` makes (it is plain
# Python + numpy + msgpack, so it loads here under 3.11).
SDK_MSGPACK = (
    Path(__file__).resolve().parents[2] / ".venv-sdk/lib/python3.12/site-packages/sie_sdk/_msgpack.py"
)
MODEL = "BAAI/bge-m3:sparse"
TIMING = Timing(
    total_ms=12.3456, queue_ms=1.0, tokenization_ms=0.5, inference_ms=9.25, postprocessing_ms=None
)
ARRAY_KEYS = {b"nd", b"type", b"kind", b"shape", b"data"}


def _dense(n: int = 3, dims: int = 384) -> np.ndarray:
    x = np.random.default_rng(7).standard_normal((n, dims)).astype(np.float32)
    unit: np.ndarray = x / np.linalg.norm(x, axis=1, keepdims=True)
    return unit


def _render(dense: np.ndarray, dtype: str, *, as_json: bool, ids: list[str | None] | None = None) -> bytes:
    column = dense_column(apply_output_dtype(dense, dtype), dtype, dense.shape[1], as_json)
    return render_encode(
        model=MODEL,
        ids=ids if ids is not None else [None] * len(dense),
        columns={"dense": column},
        timing=TIMING,
        input_tokens=42,
        as_json=as_json,
    )


def _array_from_map(value: dict[bytes, Any]) -> np.ndarray:
    """Rebuild an array from a msgpack-numpy map, checking the exact shape the SDK requires."""
    assert set(value) == ARRAY_KEYS
    assert value[b"nd"] is True
    assert isinstance(value[b"type"], str)
    assert value[b"kind"] == b""
    assert isinstance(value[b"shape"], list) and all(type(d) is int for d in value[b"shape"])
    assert isinstance(value[b"data"], bytes)
    return np.frombuffer(value[b"data"], dtype=np.dtype(value[b"type"])).reshape(value[b"shape"])


EXPECTED = {
    "float32": ("float32", "<f4", 384),
    "float16": ("float16", "<f2", 384),
    "int8": ("int8", "|i1", 384),
    "uint8": ("uint8", "|u1", 384),
    "binary": ("binary", "|u1", 48),
    "ubinary": ("binary", "|u1", 48),
}


@pytest.mark.parametrize("dtype", sorted(EXPECTED))
def test_msgpack_encode_arrays(dtype: str) -> None:
    dense = _dense()
    raw = _render(dense, dtype, as_json=False)
    body = msgpack.unpackb(raw, raw=False)
    assert list(body) == ["model", "items", "timing", "usage"]
    assert body["model"] == MODEL and body["usage"] == {"input_tokens": 42}
    wire_name, type_str, length = EXPECTED[dtype]
    expected = apply_output_dtype(dense, dtype)
    for i, item in enumerate(body["items"]):
        assert set(item) == {"dense"}
        assert item["dense"]["dims"] == 384 and item["dense"]["dtype"] == wire_name
        values = item["dense"]["values"]
        assert values[b"type"] == type_str and values[b"shape"] == [length]
        np.testing.assert_array_equal(_array_from_map(values), expected[i])


def test_msgpack_keys_are_str_except_array_maps() -> None:
    # With raw=False, str comes back as str and bin as bytes: the Python types are the wire types.
    body = msgpack.unpackb(_render(_dense(1), "float32", as_json=False), raw=False)

    def walk(node: object) -> None:
        if isinstance(node, dict):
            is_array = b"nd" in node
            for key, value in node.items():
                assert isinstance(key, bytes) if is_array else isinstance(key, str)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(body)


def _load_sdk_msgpack() -> ModuleType:
    if not SDK_MSGPACK.exists():
        pytest.skip(f"{SDK_MSGPACK} missing: run scripts/install.sh --test")
    spec = importlib.util.spec_from_file_location("_sdk_msgpack_for_test", SDK_MSGPACK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", sorted(EXPECTED))
def test_sdk_decoder_accepts_msgpack(dtype: str) -> None:
    sdk = _load_sdk_msgpack()
    dense = _dense()
    body = sdk.unpackb(_render(dense, dtype, as_json=False, ids=["a", None, "c"]), numeric_arrays=True)
    values = body["items"][0]["dense"]["values"]
    assert isinstance(values, np.ndarray)
    np.testing.assert_array_equal(values, apply_output_dtype(dense, dtype)[0])
    assert body["items"][0]["id"] == "a" and "id" not in body["items"][1]


def test_one_item_float32_msgpack_size_matches_sie() -> None:
    # SIE 0.10.1 answers "Hello" with 1,781 bytes (no usage block); ours adds usage (21 bytes).
    raw = render_encode(
        model="sentence-transformers/all-MiniLM-L6-v2",
        ids=[None],
        columns={"dense": dense_column(_dense(1), "float32", 384, False)},
        timing=Timing(1.0, 0.0, 0.0, 0.0, None),
        input_tokens=3,
        as_json=False,
    )
    assert len(raw) == 1781 + 21


def test_json_float32_values_are_exact() -> None:
    dense = _dense()
    body = json.loads(_render(dense, "float32", as_json=True))
    for i, item in enumerate(body["items"]):
        values = item["dense"]["values"]
        assert all(isinstance(v, float) for v in values)
        # Parsing as float64 gives back exactly the float32 value: nothing was rounded.
        assert values == [float(v) for v in dense[i]]
        np.testing.assert_array_equal(np.array(values, dtype=np.float32), dense[i])


@pytest.mark.parametrize("dtype", ["int8", "uint8", "binary", "ubinary"])
def test_json_integer_dtypes_are_ints(dtype: str) -> None:
    dense = _dense()
    body = json.loads(_render(dense, dtype, as_json=True))
    wire_name, _, length = EXPECTED[dtype]
    expected = apply_output_dtype(dense, dtype)
    for i, item in enumerate(body["items"]):
        assert item["dense"]["dtype"] == wire_name and item["dense"]["dims"] == 384
        values = item["dense"]["values"]
        assert len(values) == length and all(type(v) is int for v in values)
        assert values == expected[i].tolist()


def test_json_float16_values() -> None:
    dense = _dense(1)
    body = json.loads(_render(dense, "float16", as_json=True))
    assert body["items"][0]["dense"]["values"] == dense.astype(np.float16)[0].tolist()


@pytest.mark.parametrize("as_json", [True, False])
def test_ids_echoed_only_when_given(as_json: bool) -> None:
    raw = _render(_dense(), "float32", as_json=as_json, ids=["a", None, ""])
    body = json.loads(raw) if as_json else msgpack.unpackb(raw, raw=False)
    items = body["items"]
    assert items[0]["id"] == "a" and "id" not in items[1] and items[2]["id"] == ""
    assert list(items[0]) == ["id", "dense"]


def test_json_timing_and_usage() -> None:
    body = json.loads(_render(_dense(1), "float32", as_json=True))
    assert body["timing"] == {
        "total_ms": 12.3456,
        "queue_ms": 1.0,
        "tokenization_ms": 0.5,
        "inference_ms": 9.25,
        "postprocessing_ms": None,
    }
    assert body["usage"] == {"input_tokens": 42}


def test_timing_headers_format() -> None:
    headers = timing_headers(TIMING, "0.1.0")
    assert headers == {
        "x-sie-server-version": "0.1.0",
        "x-queue-time": "1.00",
        "x-tokenization-time": "0.50",
        "x-inference-time": "9.25",
        "x-total-time": "12.35",
    }


def test_timing_headers_postprocessing_only_when_positive() -> None:
    assert "x-postprocessing-time" not in timing_headers(Timing(1.0, 0.0, 0.0, 0.0, 0.0), "v")
    headers = timing_headers(Timing(1.0, None, None, None, 0.123), "v")
    assert headers["x-postprocessing-time"] == "0.12"
    assert headers["x-queue-time"] == "0.00"


def test_openai_float() -> None:
    dense = _dense(2)
    body = json.loads(
        render_openai_embeddings(model="m", dense=dense, encoding_format="float", prompt_tokens=7)
    )
    assert body["object"] == "list" and body["model"] == "m"
    assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert all(d["object"] == "embedding" for d in body["data"])
    assert body["data"][1]["embedding"] == [float(v) for v in dense[1]]


def test_openai_base64_round_trip() -> None:
    dense = _dense(2)
    body = json.loads(
        render_openai_embeddings(model="m", dense=dense, encoding_format="base64", prompt_tokens=7)
    )
    for i, entry in enumerate(body["data"]):
        decoded = np.frombuffer(base64.b64decode(entry["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, dense[i])


def test_render_error_shape() -> None:
    assert json.loads(render_error("QUEUE_FULL", "Queue is full")) == {
        "detail": {"code": "QUEUE_FULL", "message": "Queue is full"}
    }


def test_render_openai_error_shape() -> None:
    assert json.loads(
        render_openai_error("Model 'x' not found", "invalid_request_error", None, "model_not_found")
    ) == {
        "error": {
            "message": "Model 'x' not found",
            "type": "invalid_request_error",
            "param": None,
            "code": "model_not_found",
        }
    }


def test_sdk_decoder_reads_sparse_and_multivector() -> None:
    sdk = _load_sdk_msgpack()
    indices = np.array([3, 17, 2000], np.int32)
    values = np.array([0.5, 1.25, 2.0], np.float32)
    matrix = _dense(5, 8)
    columns = {
        "sparse": sparse_column([(indices, values)], 30522, False),
        "multivector": multivector_column([matrix], "float32", 8, False),
    }
    raw = render_encode(model=MODEL, ids=["x"], columns=columns, timing=TIMING, input_tokens=5, as_json=False)
    item = sdk.unpackb(raw, numeric_arrays=True)["items"][0]
    np.testing.assert_array_equal(item["sparse"]["indices"], indices)
    np.testing.assert_array_equal(item["sparse"]["values"], values)
    assert item["sparse"]["dims"] == 30522 and item["sparse"]["dtype"] == "float32"
    np.testing.assert_array_equal(item["multivector"]["values"], matrix)
    assert (item["multivector"]["num_tokens"], item["multivector"]["token_dims"]) == (5, 8)


def test_json_sparse_and_binary_multivector() -> None:
    matrix = _dense(2, 16)
    columns = {
        "sparse": sparse_column([(np.array([1, 9], np.int32), np.array([0.5, 2.0], np.float16))], 30, True),
        "multivector": multivector_column([apply_output_dtype(matrix, "binary")], "binary", 16, True),
    }
    body = json.loads(
        render_encode(model=MODEL, ids=[None], columns=columns, timing=TIMING, input_tokens=1, as_json=True)
    )
    item = body["items"][0]
    assert item["sparse"] == {"dims": 30, "dtype": "float16", "indices": [1, 9], "values": [0.5, 2.0]}
    assert item["multivector"]["dtype"] == "binary" and item["multivector"]["token_dims"] == 16
    assert item["multivector"]["values"] == np.packbits(matrix > 0, axis=-1).tolist()
