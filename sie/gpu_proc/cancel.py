"""Requests whose client left: their queued items are dropped when a batch forms, never computed.

A frontend whose HTTP client disconnects sends a CANCEL message for that request on the same ring
as the request itself, so it always arrives after the request's items were admitted. Items already
in a running batch finish (the frontend ignores their results); the rest are filtered out of the
next batches here. Entries are kept in arrival order and dropped after `ttl_s` or beyond
`max_entries`, so a cancel that came too late to matter cannot accumulate.
"""

from __future__ import annotations

import dataclasses

from sie.gpu_proc.batcher import Batch
from sie.metrics.recorders import DeviceRecorder

TTL_S = 120.0
MAX_ENTRIES = 8192


class Cancellations:
    def __init__(
        self, stats: DeviceRecorder | None = None, *, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._stats = stats
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: dict[tuple[int, int], float] = {}  # (frontend, req_id) -> when cancelled

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, source: int, req_id: int, now: float) -> None:
        self._entries[(source, req_id)] = now
        while self._entries:
            oldest, at = next(iter(self._entries.items()))
            if len(self._entries) <= self._max_entries and now - at < self._ttl_s:
                break
            del self._entries[oldest]

    def filter(self, batch: Batch) -> Batch | None:
        """The batch without cancelled items (None if none are left); the common case costs nothing."""
        entries = self._entries
        if not entries:
            return batch
        kept = [item for item in batch.items if (item.source, item.req_id) not in entries]
        dropped = len(batch.items) - len(kept)
        if not dropped:
            return batch
        if self._stats is not None:
            self._stats.cancelled(batch.model_slot, dropped)
        if not kept:
            return None
        # Items stay in ascending length order, so the longest is still the last one.
        n_tokens = sum(len(item.input_ids) for item in kept)
        return dataclasses.replace(batch, items=kept, n_tokens=n_tokens, max_length=len(kept[-1].input_ids))
