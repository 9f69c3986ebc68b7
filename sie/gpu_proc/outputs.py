"""What an adapter returns for a batch: one `Output` per result kind, in numpy, row i = item i.

A kind is either one row per item (DENSE, SCORES: `values[n, dim]`) or ragged (SPARSE,
MULTIVECTOR, TOKEN_SCORES): item i owns `values[row_offsets[i]:row_offsets[i + 1]]`, and SPARSE
also carries the vocabulary `indices` of those rows. The loop slices outputs per request with
`take`; the runner joins the outputs of a batch's length runs with `concat`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sie.shm.layout import RAGGED_KINDS, ResultKind


@dataclass(frozen=True, slots=True)
class Output:
    kind: ResultKind
    values: np.ndarray  # float32/float16; [n, dim], or [n_rows, dim] (ragged), or [n_rows] (SPARSE)
    row_offsets: np.ndarray | None = None  # int64 [n + 1] for ragged kinds
    indices: np.ndarray | None = None  # int32 [n_rows] for SPARSE

    @property
    def is_ragged(self) -> bool:
        return self.kind in RAGGED_KINDS

    @property
    def n_items(self) -> int:
        return len(self.row_offsets) - 1 if self.row_offsets is not None else len(self.values)

    @property
    def dim(self) -> int:
        """Width of a row: the embedding or label dimension (1 for SPARSE)."""
        return 1 if self.values.ndim == 1 else int(self.values.shape[1])

    def take(self, picked: list[int]) -> Output:
        """The outputs of items `picked` (batch positions), in that order."""
        if self.row_offsets is None:
            return Output(self.kind, self.values[picked])
        starts, ends = self.row_offsets[picked], self.row_offsets[np.asarray(picked) + 1]
        rows = np.concatenate([np.arange(s, e) for s, e in zip(starts.tolist(), ends.tolist(), strict=True)])
        offsets = np.zeros(len(picked) + 1, np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        indices = None if self.indices is None else self.indices[rows]
        return Output(self.kind, self.values[rows], offsets, indices)

    @staticmethod
    def concat(parts: list[Output]) -> Output:
        """Join outputs of consecutive item runs of one batch (same kind)."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        values = np.concatenate([p.values for p in parts])
        if first.row_offsets is None:
            return Output(first.kind, values)
        lengths = np.concatenate([np.diff(p.row_offsets) for p in parts if p.row_offsets is not None])
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        indices = None
        if first.indices is not None:
            indices = np.concatenate([p.indices for p in parts if p.indices is not None])
        return Output(first.kind, values, offsets, indices)


def ragged(kind: ResultKind, per_item: list[np.ndarray]) -> Output:
    """A ragged output from one array per item (rows first)."""
    lengths = np.fromiter((len(a) for a in per_item), np.int64, len(per_item))
    offsets = np.zeros(len(per_item) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Output(kind, np.concatenate(per_item), offsets)
