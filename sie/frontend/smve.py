"""SMVE (Sparse Multi-Vector Encoding): one sparse vector per multi-vector output, whose dot product
with another approximates MaxSim, so an inverted index can serve ColBERT-style embeddings (TopK,
"SMVE: Multi-Vector Retrieval That Just Works", 2026; SIE 0.10.1's `smve` option).

- per repetition r, `width` anchors: a Gaussian matrix `default_rng(seed + r).standard_normal(
  (token_dim, width), dtype=float32)` whose columns are scaled to unit length (SIE's draw, so the
  dimensions of a stored index mean the same here);
- every token is projected onto the anchors and keeps its `k` largest projections (signed);
- a query sums its tokens' kept values per dimension; a document averages them over the tokens
  that kept that dimension (a kept value of exactly zero is not counted);
- repetitions are concatenated (dimension `r * width + anchor`); with `max_nonzeros`, only that
  many values of largest magnitude stay. Indices come out ascending.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.layered_options import layered

# Bounds that keep one request's work and memory sane; TopK's published settings (65,536 anchors,
# k 32, one repetition) sit well inside them.
MAX_WIDTH = 1 << 18
MAX_REPETITIONS = 16
MAX_ANCHOR_VALUES = 1 << 25  # token_dim * width * repetitions: 128 MiB of float32 anchors
MAX_SEED = (1 << 63) - 1 - MAX_REPETITIONS
CHUNK_VALUES = 1 << 24  # projections computed at once: 64 MiB of float32 scratch


@dataclass(frozen=True, slots=True)
class SmveParams:
    width: int = 65536
    k: int = 32
    num_repetitions: int = 1
    seed: int = 42
    max_nonzeros: int | None = None

    @property
    def output_dim(self) -> int:
        return self.width * self.num_repetitions


_BOUNDS: dict[str, tuple[int, int, bool]] = {  # name: (low, high, may be null)
    "width": (1, MAX_WIDTH, False),
    "k": (1, MAX_WIDTH, False),
    "num_repetitions": (1, MAX_REPETITIONS, False),
    "seed": (0, MAX_SEED, False),
    "max_nonzeros": (1, MAX_WIDTH * MAX_REPETITIONS, True),
}
_ALLOWED = {f.name: _BOUNDS.get(f.name) for f in fields(SmveParams)}


def smve_params(options: Any, profile: Any, defaults: Any = None) -> SmveParams | None:
    """The SMVE settings of a request, or None when it gets no SMVE.

    `options` is the request's `options.smve`, `profile` the profile's runtime `smve`; either being
    non-null enables it. Keys override in order: the model's `smve_config`, the profile's, the
    request's.
    """
    checked = layered("smve", options, profile, defaults, _ALLOWED)
    if checked is None:
        return None
    params = SmveParams(**checked)
    if params.k > params.width:
        raise InvalidInput(f"options.smve.k must be at most its width ({params.width}), got {params.k}")
    return params


def encode(
    vectors: list[np.ndarray], *, is_query: bool, params: SmveParams
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each item's [n_tokens, d] token vectors -> (int32 indices ascending, float32 values).

    An item without tokens encodes to an empty vector."""
    if not vectors:
        return []
    token_dim = _token_dim(vectors)
    if token_dim * params.width * params.num_repetitions > MAX_ANCHOR_VALUES:
        raise InvalidInput(
            f"options.smve: {params.num_repetitions} repetitions x {params.width} anchors x {token_dim} "
            f"dims is too many anchor values (at most {MAX_ANCHOR_VALUES})"
        )
    lengths = np.fromiter((len(v) for v in vectors), np.int64, len(vectors))
    cells, sums = _pooled(vectors, lengths, is_query, params)
    item, dims = np.divmod(cells, params.output_dim)
    bounds = np.searchsorted(item, np.arange(len(vectors) + 1))
    return [_finish(dims[a:b], sums[a:b], params.max_nonzeros) for a, b in itertools.pairwise(bounds)]


def _token_dim(vectors: list[np.ndarray]) -> int:
    dims = {v.shape[1] for v in vectors if v.ndim == 2}
    if len(dims) != 1 or any(v.ndim != 2 for v in vectors):
        raise ValueError("SMVE needs [n_tokens, dim] arrays, all of one dim")
    return int(dims.pop())


def _pooled(
    vectors: list[np.ndarray], lengths: np.ndarray, is_query: bool, params: SmveParams
) -> tuple[np.ndarray, np.ndarray]:
    """The occupied (item, dimension) cells, as `item * output_dim + dimension` ascending, and
    their pooled values (float64; a cell may pool to zero)."""
    tokens = np.concatenate(vectors).astype(np.float32, copy=False)
    if not len(tokens):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    owner = np.repeat(np.arange(len(vectors), dtype=np.int64), lengths) * params.output_dim
    width, k = params.width, params.k
    keys, values = [], []
    rows = max(1, CHUNK_VALUES // width)
    for rep in range(params.num_repetitions):
        anchors = _anchors(params.seed, rep, tokens.shape[1], width)
        for first in range(0, len(tokens), rows):
            projected = tokens[first : first + rows] @ anchors
            top = np.argpartition(projected, width - k, axis=1)[:, width - k :]
            keys.append((owner[first : first + rows, None] + rep * width + top).ravel())
            values.append(np.take_along_axis(projected, top, axis=1).ravel())
    value = np.concatenate(values).astype(np.float64)
    cells, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    sums = np.bincount(inverse, value, len(cells))
    if not is_query:
        sums /= np.maximum(np.bincount(inverse, value != 0, len(cells)), 1.0)
    return cells, sums


def _finish(dims: np.ndarray, values: np.ndarray, limit: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Drop zeros, keep the `limit` values of largest magnitude, indices ascending."""
    nonzero = values != 0
    dims, values = dims[nonzero], values[nonzero]
    if limit is not None and len(dims) > limit:
        keep = np.sort(np.argpartition(-np.abs(values), limit - 1)[:limit])
        dims, values = dims[keep], values[keep]
    return dims.astype(np.int32), values.astype(np.float32)


@functools.lru_cache(maxsize=4)
def _anchors(seed: int, rep: int, token_dim: int, width: int) -> np.ndarray:
    """Repetition `rep`'s anchors [token_dim, width], unit columns (cached: drawing them costs more
    than one request's projections)."""
    anchors = np.random.default_rng(seed + rep).standard_normal((token_dim, width), dtype=np.float32)
    anchors /= np.linalg.norm(anchors, axis=0, keepdims=True)
    anchors.flags.writeable = False
    return anchors
