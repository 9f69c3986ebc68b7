"""MUVERA: a fixed-dimensional encoding (FDE) of a multi-vector output, so a single-vector index
can search ColBERT-style embeddings (Dhulipala et al. 2024, arXiv:2405.19504).

The algorithm is the spec's, which is SIE 0.3.1's and sionic-ai/muvera-py's port of Google's
graph-mining reference (`sketching/point_cloud/fixed_dimensional_encoding.cc`), random draws included:

- per repetition r, a Gaussian matrix `default_rng(seed + r).normal(size=(d, k))`; a token's k sign
  bits pick its partition through a Gray code (p = 2p + (bit XOR (p & 1)));
- each partition holds the sum of its token vectors (queries) or their mean (documents); a
  partition no document token fell into stays zero: Google's default (`fill_empty_partitions`
  off), and what SIE 0.3.1 returns, so stored document encodings stay comparable;
- with `projection_dim`, tokens are first projected by an AMS sketch (one random +-1 per input
  coordinate, `default_rng(seed + r)`: `integers` for the column, then `choice([-1, 1])`), as in
  the reference; None keeps the token vectors as they are;
- the repetitions' blocks are concatenated (repetition, partition, coordinate) and, with
  `final_projection_dim`, reduced by a Count Sketch drawn from `default_rng(seed)` the same way;
  a `final_projection_dim` not below the concatenation's size is ignored (SIE 0.10.1's rule: such
  a sketch could only lose information), and the concatenation is the output.

The concatenation is never built: the Count Sketch is linear and an empty partition adds nothing,
so each repetition's occupied partitions are scattered straight into the final vector. The work
then grows with the tokens and the output size, not with the 2^k partitions.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.layered_options import layered

# Bounds that keep one request's work and memory sane; the paper's settings sit well inside them.
MAX_REPETITIONS = 256
MAX_SIMHASH_PROJECTIONS = 16
MAX_PROJECTION_DIM = 4096
MAX_OUTPUT_DIM = 1 << 20
MAX_BLOCK_DIM = 1 << 22  # the concatenation before the Count Sketch (the paper's: 40 * 64 * 128 = 327,680)
MAX_SEED = (1 << 63) - 1 - MAX_REPETITIONS
CHUNK_VALUES = 1 << 18  # output values encoded at once: 2 MiB of float64 scratch stays in cache


@dataclass(frozen=True, slots=True)
class MuveraParams:
    num_repetitions: int = 40
    num_simhash_projections: int = 6
    projection_dim: int | None = None  # None: identity (the token dimension)
    final_projection_dim: int | None = 10240  # None: no Count Sketch
    seed: int = 42
    # Subtract each item's mean token before partitioning: a component every token shares would
    # otherwise put all tokens in one SimHash bucket (MaxSim itself ignores such a shift).
    center_tokens: bool = False

    @property
    def num_partitions(self) -> int:
        return 1 << self.num_simhash_projections

    def block_dim(self, token_dim: int) -> int:
        """Length of the concatenated encoding before the Count Sketch."""
        return self.num_repetitions * self.num_partitions * (self.projection_dim or token_dim)

    def sketch_dim(self, token_dim: int) -> int | None:
        """The Count Sketch's output size, or None when there is none (not set, or not a reduction)."""
        final = self.final_projection_dim
        return final if final is not None and final < self.block_dim(token_dim) else None

    def output_dim(self, token_dim: int) -> int:
        return self.sketch_dim(token_dim) or self.block_dim(token_dim)


_BOUNDS: dict[str, tuple[int, int, bool]] = {  # name: (low, high, may be null)
    "num_repetitions": (1, MAX_REPETITIONS, False),
    "num_simhash_projections": (0, MAX_SIMHASH_PROJECTIONS, False),
    "projection_dim": (1, MAX_PROJECTION_DIM, True),
    "final_projection_dim": (1, MAX_OUTPUT_DIM, True),
    "seed": (0, MAX_SEED, False),
}
_ALLOWED = {f.name: _BOUNDS.get(f.name) for f in fields(MuveraParams)}


def muvera_params(options: Any, profile: Any, defaults: Any = None) -> MuveraParams | None:
    """The MUVERA settings of a request, or None when it gets no MUVERA.

    `options` is the request's `options.muvera`, `profile` the profile's runtime `muvera`; either
    being non-null enables it. Keys override in order: the model's `muvera_config` defaults, the
    profile's, the request's.
    """
    checked = layered("muvera", options, profile, defaults, _ALLOWED)
    return None if checked is None else MuveraParams(**checked)


def fde(vectors: list[np.ndarray], *, is_query: bool, params: MuveraParams) -> np.ndarray:
    """Fixed-dimensional encodings of multi-vector items: float32 [len(vectors), output_dim].

    Each item is [n_tokens, d] (normalized token vectors, as the frontend returns them); queries
    sum per partition, documents average. An item without tokens encodes to zeros.
    """
    if not vectors:
        return np.zeros((0, params.final_projection_dim or 0), np.float32)
    token_dim = _token_dim(vectors)
    limit = MAX_OUTPUT_DIM if params.sketch_dim(token_dim) is None else MAX_BLOCK_DIM
    if params.block_dim(token_dim) > limit:
        raise InvalidInput(
            f"options.muvera: {params.num_repetitions} repetitions x {params.num_partitions} partitions x "
            f"{params.projection_dim or token_dim} dims is too large an encoding (at most {limit} values)"
        )
    out = np.zeros((len(vectors), params.output_dim(token_dim)), np.float32)
    step = max(1, CHUNK_VALUES // out.shape[1])  # items per chunk: bounds the scratch memory
    for first in range(0, len(vectors), step):
        out[first : first + step] = _encode(vectors[first : first + step], is_query, params)
    return out


def _token_dim(vectors: list[np.ndarray]) -> int:
    dims = {v.shape[1] for v in vectors if v.ndim == 2}
    if len(dims) != 1 or any(v.ndim != 2 for v in vectors):
        raise ValueError("MUVERA needs [n_tokens, dim] arrays, all of one dim")
    return int(dims.pop())


def _encode(vectors: list[np.ndarray], is_query: bool, params: MuveraParams) -> np.ndarray:
    """One chunk of items: each repetition's occupied (item, partition) cells go straight to the output."""
    lengths = np.fromiter((len(v) for v in vectors), np.int64, len(vectors))
    owner = np.repeat(np.arange(len(vectors)), lengths)
    if params.center_tokens:
        vectors = [v - v.mean(axis=0, keepdims=True, dtype=np.float32) if len(v) else v for v in vectors]
    tokens = np.concatenate(vectors).astype(np.float32, copy=False)
    n, token_dim = len(vectors), tokens.shape[1]
    width, n_parts = params.projection_dim or token_dim, params.num_partitions
    sketch, sketch_dim = None, params.sketch_dim(token_dim)
    if sketch_dim is not None:
        sketch = _count_sketch(params.seed, params.block_dim(token_dim), sketch_dim)
    # Count Sketch sums in float64 (bincount's type) and rounds once at the end.
    out = np.zeros((n, params.output_dim(token_dim)), np.float64 if sketch else np.float32)
    if not len(tokens):
        return out
    partitions = _partitions(tokens, params)  # [n_tokens, repetitions]
    for rep in range(params.num_repetitions):
        projected = tokens
        if params.projection_dim is not None:
            projected = tokens @ _ams_matrix(params.seed, rep, token_dim, params.projection_dim)
        cells, sums = _cell_sums(projected, owner * n_parts + partitions[:, rep], is_query)
        item, part = np.divmod(cells, n_parts)
        column = (rep * n_parts + part)[:, None] * width + np.arange(width)  # [cells, width]
        if sketch is None:
            out[item[:, None], column] = sums
        else:
            index, sign = sketch
            target = (item[:, None] * out.shape[1] + index[column]).ravel()
            out += np.bincount(target, (sums * sign[column]).ravel(), out.size).reshape(out.shape)
    return out


def _partitions(tokens: np.ndarray, params: MuveraParams) -> np.ndarray:
    """Each token's partition in every repetition (Gray code of its SimHash bits): int64 [n, R]."""
    n, k = len(tokens), params.num_simhash_projections
    if k == 0:
        return np.zeros((n, params.num_repetitions), np.int64)
    gaussians = _stacked_gaussians(params.seed, params.num_repetitions, tokens.shape[1], k)
    bits = (tokens @ gaussians > 0).reshape(n, params.num_repetitions, k)
    index = np.zeros((n, params.num_repetitions), np.int64)
    for b in range(k):
        index = (index << 1) + (bits[:, :, b] ^ (index & 1))
    return index


def _cell_sums(projected: np.ndarray, keys: np.ndarray, is_query: bool) -> tuple[np.ndarray, np.ndarray]:
    """The distinct keys (ascending) and the sum, or for documents the mean, of their rows.

    bincount adds in input order, so a cell's sum depends on its own tokens only (never on the
    other items of the batch), accumulated in float64.
    """
    cells, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    width = projected.shape[1]
    slots = (inverse[:, None] * width + np.arange(width)).ravel()
    sums = np.bincount(slots, projected.ravel(), len(cells) * width).astype(np.float64, copy=False)
    sums = sums.reshape(len(cells), width)
    if not is_query:
        sums /= counts[:, None]
    return cells, sums


@functools.lru_cache(maxsize=1024)
def _gaussian(seed: int, rep: int, dim: int, k: int) -> np.ndarray:
    """Repetition `rep`'s SimHash matrix [dim, k] (cached: drawing it costs more than using it)."""
    matrix = np.random.default_rng(seed + rep).normal(loc=0.0, scale=1.0, size=(dim, k)).astype(np.float32)
    matrix.flags.writeable = False
    return matrix


@functools.lru_cache(maxsize=4)
def _stacked_gaussians(seed: int, repetitions: int, dim: int, k: int) -> np.ndarray:
    """All repetitions' SimHash matrices side by side [dim, R * k], so one matmul hashes every token."""
    stacked = np.concatenate([_gaussian(seed, rep, dim, k) for rep in range(repetitions)], axis=1)
    stacked.flags.writeable = False
    return stacked


def _ams_matrix(seed: int, rep: int, dim: int, projection_dim: int) -> np.ndarray:
    """Repetition `rep`'s AMS sketch [dim, projection_dim]: one +-1 per row (built per call from
    its cached draws, which are tiny where the matrix may not be)."""
    columns, signs = _ams_draws(seed, rep, dim, projection_dim)
    matrix = np.zeros((dim, projection_dim), np.float32)
    matrix[np.arange(dim), columns] = signs
    return matrix


@functools.lru_cache(maxsize=1024)
def _ams_draws(seed: int, rep: int, dim: int, projection_dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + rep)
    columns = rng.integers(0, projection_dim, size=dim)
    signs = rng.choice(np.array([-1.0, 1.0], np.float32), size=dim)
    columns.flags.writeable = signs.flags.writeable = False
    return columns, signs


@functools.lru_cache(maxsize=4)
def _count_sketch(seed: int, input_dim: int, output_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each coordinate of the concatenated encoding lands, and with which sign."""
    rng = np.random.default_rng(seed)
    index = rng.integers(0, output_dim, size=input_dim).astype(np.int32)  # < 2^20: int32 halves the cache
    sign = rng.choice(np.array([-1.0, 1.0], np.float32), size=input_dim)
    index.flags.writeable = sign.flags.writeable = False
    return index, sign
