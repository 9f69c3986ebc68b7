"""Per-row transforms of result arrays: normalization and the `output_dtype` quantizations.

Everything works on whole matrices (one row per item) so a request costs a few numpy calls, never a
Python loop over items. The formulas are the spec's, computed in float32 as SIE computes them, so
rounding ties land on the same integers.
"""

from __future__ import annotations

import numpy as np

from sie.errors import InvalidInput


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Scale each row (last axis) to unit L2 norm; an all-zero row stays zero instead of NaN."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return _divide(x, norms)


def apply_output_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Convert float rows to the wire representation `dtype` names (see the spec's table)."""
    if dtype == "float32":
        return x.astype(np.float32, copy=False)
    if dtype == "float16":
        return x.astype(np.float16)
    if dtype == "int8":
        return _quantize_int8(x.astype(np.float32, copy=False))
    if dtype == "uint8":
        return _quantize_uint8(x.astype(np.float32, copy=False))
    if dtype in ("binary", "ubinary"):
        return np.packbits(x > 0, axis=-1)
    raise InvalidInput(f"Unsupported output_dtype: {dtype}")


def wire_dtype_name(dtype: str) -> str:
    """The `dtype` a response reports: both bit packings are reported as "binary"."""
    return "binary" if dtype == "ubinary" else dtype


def _quantize_int8(x: np.ndarray) -> np.ndarray:
    scale = np.max(np.abs(x), axis=-1, keepdims=True)
    # Divide first, then multiply by 127, as the spec writes it: x * (127 / m) rounds differently.
    scaled = _divide(x, scale) * np.float32(127)
    return np.rint(scaled).astype(np.int8)  # rint rounds half to even, like Python's round


def _quantize_uint8(x: np.ndarray) -> np.ndarray:
    low = np.min(x, axis=-1, keepdims=True)
    span = np.max(x, axis=-1, keepdims=True) - low
    scaled = _divide(x - low, span) * np.float32(255)
    return np.rint(scaled).astype(np.uint8)


def _divide(x: np.ndarray, by: np.ndarray) -> np.ndarray:
    """x / by per row, with 0 where `by` is 0 (no NaN, no warning)."""
    out = np.zeros_like(x)
    np.divide(x, by, out=out, where=by > 0)
    return out
