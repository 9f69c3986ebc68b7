"""Client-side helpers: call the server in JSON or msgpack and get numpy arrays back."""

from __future__ import annotations

from typing import Any

import httpx
import msgpack
import numpy as np

MSGPACK = "application/msgpack"


def from_msgpack_numpy(obj: Any) -> Any:
    if isinstance(obj, dict) and obj.get(b"nd") is True:
        return np.frombuffer(obj[b"data"], np.dtype(obj[b"type"])).reshape(obj[b"shape"])
    if isinstance(obj, dict):
        return {k: from_msgpack_numpy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_msgpack_numpy(v) for v in obj]
    return obj


def encode(
    url: str, model: str, body: dict[str, Any], *, as_json: bool, timeout: float = 60
) -> httpx.Response:
    return post(url, f"/v1/encode/{model}", body, as_json=as_json, timeout=timeout)


def post(url: str, path: str, body: dict[str, Any], *, as_json: bool, timeout: float = 60) -> httpx.Response:
    """POST a JSON or msgpack body, asking for the same encoding back."""
    if as_json:
        return httpx.post(f"{url}{path}", json=body, headers={"accept": "application/json"}, timeout=timeout)
    return httpx.post(
        f"{url}{path}",
        content=msgpack.packb(body, use_bin_type=True),
        headers={"content-type": MSGPACK, "accept": MSGPACK},
        timeout=timeout,
    )


def decode(response: httpx.Response) -> dict[str, Any]:
    if response.headers["content-type"].startswith(MSGPACK):
        return from_msgpack_numpy(msgpack.unpackb(response.content, raw=False))
    return response.json()


def dense_matrix(payload: dict[str, Any]) -> np.ndarray:
    return np.stack([np.asarray(item["dense"]["values"], np.float32) for item in payload["items"]])


def sie_quantized(rows: np.ndarray, dtype: str) -> np.ndarray:
    """SIE's quantizations (sie_server/core/postprocessor.py), written out here: per row, in float32.

    int8: round(x / max|x| * 127); uint8: round((x - min) / (max - min) * 255); binary and ubinary:
    one bit per value (x > 0), eight to a byte, first value in the highest bit.
    """
    rows = rows.astype(np.float32)
    if dtype == "int8":
        scale = np.abs(rows).max(axis=1, keepdims=True)
        return np.round(rows / scale * np.float32(127)).astype(np.int8)
    if dtype == "uint8":
        low, high = rows.min(axis=1, keepdims=True), rows.max(axis=1, keepdims=True)
        return np.round((rows - low) / (high - low) * np.float32(255)).astype(np.uint8)
    packed = [
        [sum(int(row[i + bit] > 0) << (7 - bit) for bit in range(8)) for i in range(0, len(row), 8)]
        for row in rows
    ]
    return np.array(packed, np.uint8)
