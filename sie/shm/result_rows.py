"""Result messages of many requests at once, for the kinds with one row per item (DENSE, SCORES).

A finished batch answers each of its requests with one message per result kind. Encoding them one
by one (`layout.encode_result`) costs a dozen numpy calls per message, which for single-item
requests is more than the rest of the device's work per item. Requests with the same number of
items give messages of the same size, so they are built as the rows of one structured array in a
handful of numpy calls: row r holds exactly the bytes `encode_result` writes for request r.
"""

from __future__ import annotations

import functools

import numpy as np

from sie.shm.layout import RAGGED_KINDS, RESULT_HEADER, ResultKind, Status, ValueDType, _aligned

_VALUE_DTYPES = {np.dtype("<f4"): ValueDType.FLOAT32, np.dtype("<f2"): ValueDType.FLOAT16}


@functools.lru_cache(maxsize=256)
def _message_dtype(n_items: int, dim: int, values: np.dtype) -> np.dtype:
    """One message of `n_items` rows of `dim` values, laid out as sie.shm.layout's result."""
    status_at = 64 + _aligned(4 * n_items)
    values_at = status_at + _aligned(n_items)
    return np.dtype(
        {
            "names": ["head", "item_index", "item_status", "values"],
            "formats": [RESULT_HEADER, ("<i4", (n_items,)), ("u1", (n_items,)), (values, (n_items, dim))],
            "offsets": [0, 64, status_at, values_at],
            "itemsize": values_at + _aligned(values.itemsize * n_items * dim),
        }
    )


def encode_row_results(
    req_ids: np.ndarray,
    kind: ResultKind,
    item_index: np.ndarray,
    values: np.ndarray,
    queue_us: np.ndarray,
    *,
    infer_us: int,
    batch_items: int,
    batch_tokens: int,
) -> np.ndarray:
    """uint8 [g, message bytes]: one OK result message per request of `g` with `k` items each.

    `req_ids` [g]; `item_index` [g, k] (the items' positions in their requests); `values` [g, k, dim]
    float32 or float16; `queue_us` [g].
    """
    if kind in RAGGED_KINDS:
        raise ValueError(f"{kind.name} results have a run of rows per item, not one")
    g, k, dim = values.shape
    value_dtype = values.dtype.newbyteorder("<")
    if value_dtype not in _VALUE_DTYPES:
        raise ValueError(f"result values must be float32 or float16, not {values.dtype}")
    messages = np.zeros(g, _message_dtype(k, dim, value_dtype))
    head = messages["head"]
    head["req_id"] = req_ids
    head["status"] = Status.OK
    head["kind"] = kind
    head["dtype"] = _VALUE_DTYPES[value_dtype]
    head["n_items"] = k
    head["dim"] = dim
    head["n_rows"] = k
    head["queue_us"] = queue_us
    head["infer_us"] = infer_us
    head["batch_items"] = batch_items
    head["batch_tokens"] = batch_tokens
    messages["item_index"] = item_index
    messages["values"] = values
    return messages.view(np.uint8).reshape(g, -1)
