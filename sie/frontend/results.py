"""One request's results, assembled from the device's result messages in request order.

A request may be split over several batches and, for a hybrid model, arrive as several kinds; it
is complete when every kind it asked for holds every item. Values are copied out of the ring as
they arrive, so the ring slot can be released at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sie.shm.layout import RAGGED_KINDS, ResultBlock, ResultKind, kinds_of


@dataclass(frozen=True, slots=True)
class Results:
    """Per kind: `rows[kind]` is [n_items, dim]; `ragged[kind][i]` is item i's rows; SPARSE items
    also have `indices[i]` (ascending vocabulary ids, one per value)."""

    rows: dict[ResultKind, np.ndarray]
    ragged: dict[ResultKind, list[np.ndarray]]
    indices: list[np.ndarray]
    queue_ms: float
    inference_ms: float


@dataclass(slots=True)
class ResultAssembler:
    n_items: int
    output_mask: int
    _rows: dict[ResultKind, np.ndarray] = field(default_factory=dict)
    _ragged: dict[ResultKind, list[np.ndarray]] = field(default_factory=dict)
    _indices: list[np.ndarray] = field(default_factory=list)
    _filled: dict[ResultKind, int] = field(default_factory=dict)
    queue_us: int = 0
    infer_us: int = 0

    @property
    def is_complete(self) -> bool:
        return all(self._filled.get(kind, 0) >= self.n_items for kind in kinds_of(self.output_mask))

    def add(self, block: ResultBlock) -> None:
        """Copy one OK block's items in (the block's arrays are views into a ring slot)."""
        kind = ResultKind(block.kind)
        if kind in RAGGED_KINDS:
            self._add_ragged(kind, block)
        else:
            rows = self._rows.get(kind)
            if rows is None:
                rows = self._rows[kind] = np.empty((self.n_items, block.values.shape[1]), np.float32)
            rows[block.item_index] = block.values
        self._filled[kind] = self._filled.get(kind, 0) + block.n_items
        self.queue_us = max(self.queue_us, block.queue_us)
        if kind == kinds_of(self.output_mask)[0]:  # one forward made every kind: count its time once
            self.infer_us += block.infer_us

    def _add_ragged(self, kind: ResultKind, block: ResultBlock) -> None:
        per_item = self._ragged.get(kind)
        if per_item is None:
            per_item = self._ragged[kind] = [_EMPTY] * self.n_items
            if kind == ResultKind.SPARSE:
                self._indices = [_EMPTY_INDICES] * self.n_items
        offsets = block.row_offsets
        assert offsets is not None  # the layout guarantees offsets for ragged kinds
        bounds = offsets.tolist()
        for j, index in enumerate(block.item_index.tolist()):
            start, end = bounds[j], bounds[j + 1]
            per_item[index] = np.array(block.values[start:end], np.float32)
            if kind == ResultKind.SPARSE and block.indices is not None:
                self._indices[index] = np.array(block.indices[start:end], np.int32)

    def results(self) -> Results:
        return Results(self._rows, self._ragged, self._indices, self.queue_us / 1000, self.infer_us / 1000)


_EMPTY = np.zeros(0, np.float32)
_EMPTY_INDICES = np.zeros(0, np.int32)
