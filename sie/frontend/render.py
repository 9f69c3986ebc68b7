"""Response bodies: one builder per operation, shared by every transport and both encodings.

msgpack bodies carry arrays as msgpack-numpy maps (bin keys, raw little-endian bytes), which is the
only array form the SIE SDK accepts; JSON bodies carry plain lists. Errors are always JSON.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack  # type: ignore[import-untyped]
import msgspec
import numpy as np

from sie.frontend.postprocess import wire_dtype_name


@dataclass(frozen=True, slots=True)
class Timing:
    """Milliseconds spent per stage of one request; None where a stage did not run."""

    total_ms: float | None = None
    queue_ms: float | None = None
    tokenization_ms: float | None = None
    inference_ms: float | None = None
    postprocessing_ms: float | None = None


def timing_headers(t: Timing, server_version: str) -> dict[str, str]:
    """The success headers SIE sends; postprocessing only when it took any time."""
    headers = {
        "x-sie-server-version": server_version,
        "x-queue-time": _ms(t.queue_ms),
        "x-tokenization-time": _ms(t.tokenization_ms),
        "x-inference-time": _ms(t.inference_ms),
        "x-total-time": _ms(t.total_ms),
    }
    if t.postprocessing_ms:
        headers["x-postprocessing-time"] = _ms(t.postprocessing_ms)
    return headers


def _ms(value: float | None) -> str:
    return f"{value or 0.0:.2f}"


def _timing_body(t: Timing) -> dict[str, float | None]:
    return {
        "total_ms": t.total_ms or 0.0,
        "queue_ms": t.queue_ms or 0.0,
        "tokenization_ms": t.tokenization_ms or 0.0,
        "inference_ms": t.inference_ms or 0.0,
        # SIE sends null rather than 0 when no postprocessing ran.
        "postprocessing_ms": t.postprocessing_ms or None,
    }


def render_encode(
    *,
    model: str,
    ids: Sequence[str | None],
    columns: dict[str, list[dict[str, Any]]],
    timing: Timing,
    input_tokens: int,
    as_json: bool,
) -> bytes:
    """The encode response: one column per requested output (see the *_column builders)."""
    body = {
        "model": model,
        "items": _items(ids, columns),
        "timing": _timing_body(timing),
        "usage": {"input_tokens": input_tokens},
    }
    return encode_body(body, as_json)


def encode_body(body: object, as_json: bool) -> bytes:
    return msgspec.json.encode(body) if as_json else _pack(body)


def dense_column(dense: np.ndarray, output_dtype: str, dims: int, as_json: bool) -> list[dict[str, Any]]:
    """`dense` is already in `output_dtype` (n x dims, or n x packed bytes for binary)."""
    dtype = wire_dtype_name(output_dtype)
    # tolist() on the whole matrix is one C loop, and on float32 it yields the exact float32
    # values as Python floats, which JSON then writes at full precision.
    rows = dense.tolist() if as_json else [_ndarray_map(row) for row in dense]
    return [{"dims": dims, "dtype": dtype, "values": row} for row in rows]


def sparse_column(
    sparse: Sequence[tuple[np.ndarray, np.ndarray]], dims: int, as_json: bool
) -> list[dict[str, Any]]:
    """Per item (int32 indices ascending, float32 or float16 values)."""
    column = []
    for indices, values in sparse:
        dtype = "float16" if values.dtype == np.float16 else "float32"
        as_wire = (lambda a: a.tolist()) if as_json else _ndarray_map
        column.append({"dims": dims, "dtype": dtype, "indices": as_wire(indices), "values": as_wire(values)})
    return column


def multivector_column(
    matrices: Sequence[np.ndarray], output_dtype: str, token_dims: int, as_json: bool
) -> list[dict[str, Any]]:
    """Per item [num_tokens, token_dims] already in `output_dtype` (packed bits for binary)."""
    dtype = wire_dtype_name(output_dtype)
    return [
        {
            "token_dims": token_dims,
            "num_tokens": len(matrix),
            "dtype": dtype,
            "values": matrix.tolist() if as_json else _ndarray_map(matrix),
        }
        for matrix in matrices
    ]


def _items(ids: Sequence[str | None], columns: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for i, item_id in enumerate(ids):
        item: dict[str, Any] = {} if item_id is None else {"id": item_id}
        for name, column in columns.items():
            item[name] = column[i]
        items.append(item)
    return items


def _ndarray_map(array: np.ndarray) -> dict[bytes, Any]:
    """A msgpack-numpy array: the SDK checks these exact bin keys and a little-endian dtype."""
    contiguous = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {
        b"nd": True,
        b"type": contiguous.dtype.str,
        b"kind": b"",
        b"shape": list(contiguous.shape),
        b"data": contiguous.tobytes(),
    }


def _pack(body: object) -> bytes:
    # A Packer per call: packers keep internal buffers and are not safe to share between threads.
    packed: bytes = msgpack.Packer(use_bin_type=True).pack(body)
    return packed


def render_openai_embeddings(
    *, model: str, dense: np.ndarray, encoding_format: str, prompt_tokens: int
) -> bytes:
    """The OpenAI embeddings response (always JSON); base64 is little-endian float32 bytes."""
    values = np.ascontiguousarray(dense, dtype="<f4")
    if encoding_format == "base64":
        embeddings: list[Any] = [base64.b64encode(row.tobytes()).decode("ascii") for row in values]
    else:
        embeddings = values.tolist()
    data = [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(embeddings)]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return msgspec.json.encode({"object": "list", "data": data, "model": model, "usage": usage})


def render_score(
    *, model: str, query_id: str | None, ranked: list[dict[str, Any]], input_tokens: int, as_json: bool
) -> bytes:
    body = {"model": model, "query_id": query_id, "scores": ranked, "usage": {"input_tokens": input_tokens}}
    return encode_body(body, as_json)


def render_extract(*, model: str, items: list[dict[str, Any]], as_json: bool) -> bytes:
    return encode_body({"model": model, "items": items}, as_json)


def render_error(code: str, message: str) -> bytes:
    return msgspec.json.encode({"detail": {"code": code, "message": message}})


def render_openai_error(
    message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> bytes:
    return msgspec.json.encode({"error": {"message": message, "type": type_, "param": param, "code": code}})
