"""Batch former: one FIFO per (model, inference config) group; batches by token cost. No torch.

Items of different HTTP requests and different frontends share a batch when their group key
matches. A group is "ready" when its head batch is full (item cap or token budget) or its oldest
item has waited `max_batch_wait_s`; when the device is idle the oldest group goes at once, since
waiting for a fuller batch only helps when the device has something else to do meanwhile.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

import numpy as np

from sie.model_config import DEFAULT_MAX_BATCH_TOKENS
from sie.shm.layout import TokenBatch


class GroupKey(NamedTuple):
    """Items share a batch only when all of these are equal, so text, images and audio (different
    forwards), queries and documents, and different options never meet in one forward."""

    model_slot: int
    op: int
    output_mask: int
    config_key: int  # the request options' key (LoRA, truncation, ...), opaque here
    is_query: int
    modality: int = 0  # sie.shm.layout's Modality: text (0), image, audio


@dataclass(slots=True)
class PendingItem:
    source: int  # the frontend ring the item came from; its result goes back there
    req_id: int
    item_index: int  # absolute position in its HTTP request
    input_ids: np.ndarray  # int32 view into the request message
    token_type_ids: np.ndarray | None  # int8 view, or None
    enqueued_s: float  # monotonic seconds when it entered the batcher
    submit_ns: int  # frontend's time.monotonic_ns() at submit, for queue time
    aux: np.ndarray | None = None  # int32 view of the per-token aux section, or None
    media: np.ndarray | None = None  # an image [H, W, 3] or an audio window's samples (views)
    scalar: float = 0.0  # the request's float parameter (sie.shm.layout.TokenBatch.scalar)

    @property
    def cost(self) -> int:
        """Batch budget units: tokens for text; 1 per image, and 1 per audio window, since the
        frontend cuts audio into windows of at most the model's chunk (samples / chunk <= 1)."""
        return len(self.input_ids) if self.media is None else 1


# On a CPU a forward of fewer tokens runs faster per token (its activations stay in cache). SciFact
# abstracts (240 tokens on average) through MiniLM's packed forward, sorted by length, on the 2-core
# VM: 16.7 / 18.1 / 18.0 / 17.0 / 14.6 / 14.0 docs/s with budgets of 1,024 / 2,048 / 3,072 / 4,096 /
# 8,192 / 16,384 tokens. So a model that keeps the default budget (sized for GPUs) gets this one on
# a CPU device; a budget set in its YAML or by --max-batch-tokens is kept as it is.
CPU_MAX_BATCH_TOKENS = 2048


def token_budget(configured: int, device: str) -> int:
    if device.startswith("cpu") and configured == DEFAULT_MAX_BATCH_TOKENS:
        return CPU_MAX_BATCH_TOKENS
    return configured


@dataclass(frozen=True, slots=True)
class Batch:
    key: GroupKey
    items: list[PendingItem]  # ascending token length, so padding is tight per sub-range
    n_tokens: int  # sum of real lengths
    max_length: int
    formed_s: float

    @property
    def model_slot(self) -> int:
        return self.key.model_slot

    @property
    def output_mask(self) -> int:
        return self.key.output_mask

    @property
    def is_query(self) -> bool:
        return bool(self.key.is_query)


class _Group:
    """One group's queue plus its running token total (so readiness is O(1))."""

    __slots__ = ("items", "n_tokens")

    def __init__(self) -> None:
        self.items: deque[PendingItem] = deque()
        self.n_tokens = 0


class Batcher:
    def __init__(
        self,
        *,
        max_batch_requests: int = 64,
        max_batch_wait_s: float = 0.010,
        max_pending_items: int = 512,
        max_batch_tokens: Callable[[int], int] = lambda slot: 16384,
    ) -> None:
        self.max_batch_requests = max_batch_requests
        self.max_batch_wait_s = max_batch_wait_s
        self.max_pending_items = max_pending_items
        self.max_batch_tokens = max_batch_tokens
        # Insertion-ordered; groups are removed when they empty so iteration stays short.
        self._groups: dict[GroupKey, _Group] = {}
        self._pending_by_model: dict[int, int] = {}
        self._n_items = 0

    def __len__(self) -> int:
        return self._n_items

    def pending_items(self, model_slot: int | None = None) -> int:
        if model_slot is None:
            return self._n_items
        return self._pending_by_model.get(model_slot, 0)

    def try_add(self, batch: TokenBatch, source: int, now: float) -> bool:
        """Queue every item of one request message, or none of them (False) if over the cap."""
        n_items = batch.n_items
        slot = batch.model_slot
        if self._pending_by_model.get(slot, 0) + n_items > self.max_pending_items:
            return False
        if n_items == 0:
            return True
        key = GroupKey(
            slot,
            int(batch.op),
            int(batch.output_mask),
            int(batch.config_key),
            int(batch.is_query),
            int(batch.modality),
        )
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        offsets = batch.offsets.tolist()  # Python ints: much faster to slice with than numpy scalars
        ids, types, aux = batch.input_ids, batch.token_type_ids, batch.aux
        media = _media_of(batch)
        for i in range(n_items):
            start, end = offsets[i], offsets[i + 1]
            group.items.append(
                PendingItem(
                    source=source,
                    req_id=batch.req_id,
                    item_index=batch.item_base + i,
                    input_ids=ids[start:end],
                    token_type_ids=None if types is None else types[start:end],
                    enqueued_s=now,
                    submit_ns=batch.submit_ns,
                    aux=None if aux is None else aux[start:end],
                    media=None if media is None else media[i],
                    scalar=batch.scalar,
                )
            )
        group.n_tokens += offsets[n_items] - offsets[0] if media is None else n_items
        self._count(slot, n_items)
        return True

    def next_batch(self, now: float, *, idle: bool) -> Batch | None:
        """The next batch to run, or None when nothing is ready and the device is busy."""
        key = self._pick(now, idle)
        if key is None:
            return None
        return self._take(key, now)

    def seconds_to_deadline(self, now: float) -> float | None:
        """Seconds until some group becomes ready by waiting (0 if one is ready); None if empty."""
        earliest: float | None = None
        for key, group in self._groups.items():
            if self._is_full(key, group):
                return 0.0
            due = group.items[0].enqueued_s + self.max_batch_wait_s
            if earliest is None or due < earliest:
                earliest = due
        return None if earliest is None else max(0.0, earliest - now)

    def drop_source(self, source: int) -> int:
        """A frontend restarted: forget its items (nobody is left to read their results)."""
        dropped = 0
        for key in list(self._groups):
            group = self._groups[key]
            kept = deque(item for item in group.items if item.source != source)
            gone = len(group.items) - len(kept)
            if gone:
                group.items = kept
                group.n_tokens = sum(item.cost for item in kept)
                self._count(key.model_slot, -gone)
                dropped += gone
                if not kept:
                    del self._groups[key]
        return dropped

    def drop_model(self, model_slot: int) -> list[PendingItem]:
        """Remove and return a model's items (it failed or was unloaded) so they can be answered."""
        dropped: list[PendingItem] = []
        for key in [k for k in self._groups if k.model_slot == model_slot]:
            dropped.extend(self._groups.pop(key).items)
        self._count(model_slot, -len(dropped))
        return dropped

    def _count(self, model_slot: int, delta: int) -> None:
        self._n_items += delta
        left = self._pending_by_model.get(model_slot, 0) + delta
        if left:
            self._pending_by_model[model_slot] = left
        else:
            self._pending_by_model.pop(model_slot, None)

    def _is_full(self, key: GroupKey, group: _Group) -> bool:
        # Total tokens >= budget means a FIFO take stops on the budget (or lands exactly on it).
        if len(group.items) >= self.max_batch_requests:
            return True
        return group.n_tokens >= self.max_batch_tokens(key.model_slot)

    def _is_ready(self, key: GroupKey, group: _Group, now: float) -> bool:
        waited = now - group.items[0].enqueued_s
        return waited >= self.max_batch_wait_s or self._is_full(key, group)

    def _pick(self, now: float, idle: bool) -> GroupKey | None:
        """Among ready groups (all groups when idle), the one whose oldest item is oldest."""
        best: GroupKey | None = None
        best_s = 0.0
        for key, group in self._groups.items():
            head_s = group.items[0].enqueued_s
            if (best is None or head_s < best_s) and (idle or self._is_ready(key, group, now)):
                best, best_s = key, head_s
        return best

    def _take(self, key: GroupKey, now: float) -> Batch:
        group = self._groups[key]
        budget = self.max_batch_tokens(key.model_slot)
        items: list[PendingItem] = []
        n_tokens = 0
        for item in islice(group.items, self.max_batch_requests):
            length = item.cost
            if items and n_tokens + length > budget:
                break
            items.append(item)
            n_tokens += length
        for _ in items:
            group.items.popleft()
        group.n_tokens -= n_tokens
        if not group.items:
            del self._groups[key]
        self._count(key.model_slot, -len(items))
        items.sort(key=lambda item: len(item.input_ids))
        max_length = len(items[-1].input_ids)
        return Batch(key=key, items=items, n_tokens=n_tokens, max_length=max_length, formed_s=now)


def _media_of(batch: TokenBatch) -> np.ndarray | list[np.ndarray] | None:
    """Per item of a media request: its image (pixels[i]) or its samples; None for text."""
    if batch.pixels is not None:
        return batch.pixels
    if batch.samples is None or batch.sample_offsets is None:
        return None
    bounds = batch.sample_offsets.tolist()
    return [batch.samples[bounds[i] : bounds[i + 1]] for i in range(batch.n_items)]
