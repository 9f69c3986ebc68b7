"""Pillow's bilinear and bicubic resize of uint8 RGB pixels, bit for bit, in half its time.

Pillow resamples in two separable passes, each a weighted sum of a few neighbours in 8-bit fixed
point (22 fractional bits, weights rounded from float64), the first pass rounded to uint8 before
the second. The same arithmetic here gives the same bytes (tested against
Pillow over many sizes); what changes is the memory order. Every pass runs along whole rows of
a [lines, line_length] array, so the inner loop is one multiply-add over contiguous bytes, which
the compiler vectorizes; for the horizontal pass the image is transposed first (blocked, so
both sides stay in cache) and back after. The columns a centre crop would drop are never computed.
The loops are compiled by numba, in the first process that needs them (then from its disk cache).
A 640x480 photo to CLIP's 224x224 crop: Pillow 3.1 ms, here about 1.5 ms on this CPU.

The passes run in Pillow's order, which changed in 13.0 (`vertical_first`); pillow is pinned
below 14 so that a new rule cannot slip in untested. Other filters, and images narrower than a
filter's window, return None, and the caller resizes with Pillow.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any, NamedTuple

import numpy as np
from PIL import Image

PRECISION_BITS = 22  # Pillow's fixed point for 8-bit images: 32 - 8 - 2
BILINEAR, BICUBIC = int(Image.Resampling.BILINEAR), int(Image.Resampling.BICUBIC)
SUPPORT = {BILINEAR: 1.0, BICUBIC: 2.0}
_PILLOW_13 = int(Image.__version__.split(".")[0]) >= 13


def resize(
    pixels: np.ndarray, width: int, height: int, resample: int, left: int = 0, kept: int | None = None
) -> np.ndarray | None:
    """[height, kept, 3]: `pixels` [H, W, 3] uint8 resized to (width, height), columns
    left .. left + kept of the result (all by default); None where Pillow must do it."""
    kept = width if kept is None else kept
    in_h, in_w = pixels.shape[:2]
    horizontal, vertical = width != in_w, height != in_h
    kernels = compiled()
    if kernels is None or resample not in SUPPORT or pixels.dtype != np.uint8:
        return None
    if (horizontal and in_w < _window(resample, in_w, width)) or (
        vertical and in_h < _window(resample, in_h, height)
    ):
        return None  # a window wider than the image: Pillow's clipped windows are not padded here
    rows = np.ascontiguousarray(pixels).reshape(in_h, in_w * 3)  # [lines, RGB bytes]
    if vertical and (not horizontal or vertical_first(in_w, in_h, width, height)):
        rows = _vertical(kernels, rows, height, resample)
        vertical = False
    if horizontal:
        rows = _horizontal(kernels, rows, width, resample, left, kept)
    else:
        rows = np.ascontiguousarray(rows[:, left * 3 : (left + kept) * 3])
    if vertical:
        rows = _vertical(kernels, rows, height, resample)
    return rows.reshape(-1, kept, 3)


def vertical_first(in_w: int, in_h: int, width: int, height: int) -> bool:
    """Whether Pillow runs the vertical pass first: from 13.0 when the height shrinks by more
    than twice as many pixels as the width does; before, never."""
    shrink_h, shrink_w = in_h - height, in_w - width
    return _PILLOW_13 and shrink_h > 0 and shrink_h > shrink_w * 2


def _vertical(kernels: Kernels, rows: np.ndarray, height: int, resample: int) -> np.ndarray:
    """[height, length]: the vertical pass over [H, length] rows, which are its lines as they lie."""
    starts, weights = _coefficients(rows.shape[0], height, resample)
    out = np.empty((height, rows.shape[1]), np.uint8)
    kernels.lines(rows, starts, weights, out)
    return out


def _horizontal(
    kernels: Kernels, rows: np.ndarray, width: int, resample: int, left: int, kept: int
) -> np.ndarray:
    """[H, kept * 3]: the horizontal pass over [H, W * 3] rows, along the transposed image's lines."""
    in_h, in_w = rows.shape[0], rows.shape[1] // 3
    starts, weights = _coefficients(in_w, width, resample)
    across = np.empty((in_w, in_h * 3), np.uint8)
    kernels.transpose(rows, across)
    done = np.empty((kept, in_h * 3), np.uint8)
    kernels.lines(across, starts[left : left + kept], weights[left : left + kept], done)
    rows = np.empty((in_h, kept * 3), np.uint8)
    kernels.transpose(done, rows)
    return rows


def _window(resample: int, in_size: int, out_size: int) -> int:
    """How many inputs one output reads at most: Pillow's `ksize`."""
    scale = max(in_size / out_size, 1.0)
    return int(np.ceil(SUPPORT[resample] * scale)) * 2 + 1


def _filter(resample: int, x: np.ndarray) -> np.ndarray:
    """Pillow's filters, in its own order of float64 operations."""
    x = np.abs(x)
    out = np.zeros_like(x)
    if resample == BILINEAR:
        inside = x < 1.0
        out[inside] = 1.0 - x[inside]
        return out
    a = -0.5
    near, far = x < 1.0, (x >= 1.0) & (x < 2.0)
    y = x[near]
    out[near] = ((a + 2.0) * y - (a + 3.0)) * y * y + 1
    y = x[far]
    out[far] = (((y - 5) * y + 8) * y - 4) * a
    return out


@lru_cache(maxsize=256)
def _coefficients(in_size: int, out_size: int, resample: int) -> tuple[np.ndarray, np.ndarray]:
    """Each output's first input and its fixed-point weights over a window of equal length,
    as Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` compute them (box 0..in_size).
    Windows near the end start earlier, with zero weights ahead, so every read stays inside."""
    scale = float(np.float32(in_size)) / out_size  # Pillow's box is float32; sizes are exact in it
    filterscale = max(scale, 1.0)
    support = SUPPORT[resample] * filterscale
    size = _window(resample, in_size, out_size)
    center = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    first = np.maximum((center - support + 0.5).astype(np.int64), 0)  # C's (int) truncates
    count = np.minimum((center + support + 0.5).astype(np.int64), in_size) - first
    weights = np.zeros((out_size, size))
    total = np.zeros(out_size)
    for tap in range(size):  # summed in tap order, as Pillow's loop does
        w = np.where(tap < count, _filter(resample, (tap + first - center + 0.5) * (1.0 / filterscale)), 0.0)
        weights[:, tap] = w
        total = total + w
    weights = np.divide(weights, total[:, None], out=weights, where=total[:, None] != 0.0)
    scaled = weights * (1 << PRECISION_BITS)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int32)
    starts = np.clip(np.minimum(first, in_size - size), 0, None)
    padded = np.zeros((out_size, size), np.int32)
    for out in range(out_size):
        shift = int(first[out] - starts[out])
        padded[out, shift : shift + count[out]] = fixed[out, : count[out]]
    return starts.astype(np.int32), padded


def _lines(src: np.ndarray, starts: np.ndarray, weights: np.ndarray, out: np.ndarray) -> None:
    """out[j] = clip8(sum over t of src[starts[j] + t] * weights[j, t]), whole lines at a time."""
    taps, length = weights.shape[1], src.shape[1]
    acc = np.empty(length, np.int32)
    for j in range(out.shape[0]):
        acc[:] = 1 << (PRECISION_BITS - 1)
        for t in range(taps):
            w = weights[j, t]
            if w != 0:
                line = src[starts[j] + t]
                for i in range(length):
                    acc[i] += np.int32(line[i]) * w
        for i in range(length):
            v = acc[i] >> PRECISION_BITS
            out[j, i] = 0 if v < 0 else (255 if v > 255 else v)


def _transpose(src: np.ndarray, out: np.ndarray) -> None:
    """RGB src [a, b * 3] -> out [b, a * 3], pixel by pixel, in cache-sized blocks (the three
    channels spelled out: as a loop, the compiled copy took twice as long)."""
    a, b = src.shape[0], src.shape[1] // 3
    block = 32
    for i0 in range(0, a, block):
        for j0 in range(0, b, block):
            for i in range(i0, min(i0 + block, a)):
                for j in range(j0, min(j0 + block, b)):
                    out[j, i * 3] = src[i, j * 3]
                    out[j, i * 3 + 1] = src[i, j * 3 + 1]
                    out[j, i * 3 + 2] = src[i, j * 3 + 2]


class Kernels(NamedTuple):
    lines: Callable[..., None]
    transpose: Callable[..., None]


@cache
def compiled() -> Kernels | None:
    """The two loops compiled (None without numba): imported and compiled on first use, so a
    frontend that never resizes an image never loads numba (about 130 MB of memory)."""
    try:
        import numba
    except ImportError:  # a platform without numba's wheel: Pillow resizes everything
        return None

    def jit(function: Any) -> Callable[..., None]:
        # Without the GIL; cached on disk where numba finds a writable place (beside this file
        # or in the user's cache), else compiled again by each process.
        try:
            return numba.njit(cache=True, nogil=True)(function)
        except RuntimeError:  # no writable cache location (a read-only install and no home)
            return numba.njit(nogil=True)(function)

    return Kernels(jit(_lines), jit(_transpose))


def warm() -> None:
    """Compile (or load from numba's cache) now, off the request path: about a second."""
    resize(np.zeros((40, 60, 3), np.uint8), 30, 20, BICUBIC)
