"""The fake model's outputs: deterministic functions of an item's token ids, a whole batch at a time.

An item's key folds each token (id, token type, position) through splitmix64's finalizer, sums
them (so padding adds nothing), and mixes in the length. Everything else is the key mixed with a
column or row number: dense values in [-1, 1) normalized to unit length, a pair score in [0, 1),
up to eight sparse terms with positive weights, and one unit vector per word for multi-vector.
Numpy on whole [n, L] and [n, dim] arrays: no Python work per token or per value.

SIE's fake hashes the text with SHA-256, 48 digests for one 384-d vector, which costs more CPU per
item than this whole server's loop; so the values differ from SIE's, while the contract is SIE's:
the same input gives the same output, different inputs different outputs, dims as declared.
"""

from __future__ import annotations

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SCORE_SALT = np.uint64(0x5C0E5C0E5C0E5C0E)
_SPARSE_SALT = np.uint64(0x5BA45E5BA45E5BA4)
_WORD_SALT = np.uint64(0x3D3D3D3D3D3D3D3D)
SPARSE_TERMS = 8
# Code points Python's str.split() splits on, as a lookup table (all lie below U+3001).
_SPACE = np.array([chr(c).isspace() for c in range(0x3001)])
_SPACE_LAST = len(_SPACE) - 1


def mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on a uint64 array (a fresh array; arithmetic wraps)."""
    z = z ^ (z >> np.uint64(30))
    z *= _M1
    z ^= z >> np.uint64(27)
    z *= _M2
    z ^= z >> np.uint64(31)
    return z


def item_keys(ids: np.ndarray, types: np.ndarray | None, lengths: np.ndarray) -> np.ndarray:
    """uint64 [n]: one key per row of right-padded ids [n, L] (types alike, or None; int64)."""
    width = ids.shape[1]
    tokens = ids.astype(np.uint64)
    if types is not None:
        tokens |= types.astype(np.uint64) << np.uint64(32)
    tokens ^= np.arange(width, dtype=np.uint64) * _GOLDEN  # the position, broadcast over rows
    folded = mix(tokens)
    folded[np.arange(width) >= lengths[:, None]] = 0
    return mix(folded.sum(axis=1, dtype=np.uint64) + lengths.astype(np.uint64) * _GOLDEN)


def _unit_floats(bits: np.ndarray) -> np.ndarray:
    """The top 24 bits of each uint64 as a float32 in [-1, 1) (exact: 24 bits fit a float32)."""
    return (bits >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-23) - np.float32(1.0)


def _columns(dim: int) -> np.ndarray:
    return np.arange(1, dim + 1, dtype=np.uint64) * _GOLDEN


def _normalized(rows: np.ndarray) -> np.ndarray:
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    rows /= np.maximum(norms, np.float32(1e-12))[:, None]
    return rows


def dense(keys: np.ndarray, dim: int) -> np.ndarray:
    """float32 [n, dim] unit vectors."""
    return _normalized(_unit_floats(mix(keys[:, None] ^ _columns(dim))))


def scores(keys: np.ndarray) -> np.ndarray:
    """float32 [n, 1] in [0, 1)."""
    bits = mix(keys ^ _SCORE_SALT) >> np.uint64(40)
    return (bits.astype(np.float32) * np.float32(2.0**-24))[:, None]


def sparse(keys: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(float32 values, int32 indices, int64 row_offsets [n + 1]): up to SPARSE_TERMS distinct terms
    below `dim` per item, ascending, each with a weight in [0.01, 1.01)."""
    drawn = mix((keys ^ _SPARSE_SALT)[:, None] ^ _columns(SPARSE_TERMS))
    terms = np.sort(drawn % np.uint64(dim), axis=1)
    kept = np.ones(terms.shape, bool)
    kept[:, 1:] = terms[:, 1:] != terms[:, :-1]
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(kept.sum(axis=1), out=offsets[1:])
    weights = (mix(terms[kept] ^ keys.repeat(kept.sum(axis=1))) >> np.uint64(40)).astype(np.float32)
    return weights * np.float32(2.0**-24) + np.float32(0.01), terms[kept].astype(np.int32), offsets


def word_counts(ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64 [n]: whitespace-separated words in each row of padded code points [n, L]."""
    space = _SPACE[np.clip(ids, 0, _SPACE_LAST)] & (ids <= _SPACE_LAST)
    space[np.arange(ids.shape[1]) >= lengths[:, None]] = True  # padding separates like a space
    starts = ~space
    starts[:, 1:] &= space[:, :-1]
    return starts.sum(axis=1)


def multivector(keys: np.ndarray, rows_per_item: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(float32 [sum rows, dim] unit vectors, int64 row_offsets [n + 1]): item i gets
    `rows_per_item[i]` vectors, each from its key and row number."""
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(rows_per_item, out=offsets[1:])
    row = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], rows_per_item)
    row_keys = mix(np.repeat(keys, rows_per_item) ^ ((row.astype(np.uint64) + np.uint64(1)) * _WORD_SALT))
    return dense(row_keys, dim), offsets
