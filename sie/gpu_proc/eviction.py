"""Which model to unload, and when: memory pressure, idleness, and out-of-memory recovery.

The victim is always the least recently *used* loaded model (every batch touches its model, not
only the load), never a preloaded one (the operator asked for it to stay, and readiness counts on
it), and never one with work in flight: a batch running on it (a lease) or items queued for it.

- Before a load (loader thread): unload victims until the model's expected size fits under the
  threshold, measured after each unload. The model being loaded replaces them, so this may unload
  the last other model.
- Every second (loop thread): if use is over the threshold, unload one victim, never the last
  loaded model; the next check sees the memory it freed. Models unused for `idle_evict_s` go too.
- On an out-of-memory forward (inference thread): unload one other model, then retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from sie.gpu_proc.memory import MemoryProbe, MemoryReading
from sie.gpu_proc.registry import Registry
from sie.shm.control import ControlBlock

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0


class MemoryManager:
    def __init__(
        self,
        registry: Registry,
        probe: MemoryProbe,
        control: ControlBlock,
        device_index: int,
        *,
        threshold_percent: float = 85.0,
        idle_evict_s: float | None = None,
        pinned: Collection[int] = (),
        is_queued: Callable[[int], bool] = lambda slot: False,
    ) -> None:
        self.registry = registry
        self.probe = probe
        self.control = control
        self.device_index = device_index
        self.threshold = threshold_percent / 100
        self.idle_evict_s = idle_evict_s if idle_evict_s and idle_evict_s > 0 else None
        self.pinned = frozenset(pinned)
        self._is_queued = is_queued
        self._due_s = 0.0
        self.evictions = 0

    def limit_bytes(self, reading: MemoryReading) -> int:
        return int(reading.capacity_bytes * self.threshold)

    def read(self) -> MemoryReading:
        reading = self.probe.read()
        self.control.set_device_memory(self.device_index, reading.used_bytes, reading.capacity_bytes)
        return reading

    # -- the three occasions ---------------------------------------------------------------------------
    def make_room(self, slot: int) -> None:
        """Before loading `slot` (loader thread): unload LRU models until it is expected to fit."""
        need = self.registry.expected_bytes(slot)
        while (reading := self.read()).used_bytes + need > self.limit_bytes(reading):
            victim = self.victim(exclude=slot, keep_last=False)
            if victim is None or not self._unload(victim, "make room", wait=True):
                log.warning(
                    "loading over the memory threshold: every other model is busy or pinned",
                    extra={"used_bytes": reading.used_bytes, "need_bytes": need},
                )
                return

    def check(self, now: float) -> None:
        """Every CHECK_EVERY_S (loop thread): relieve pressure, then unload idle models."""
        if now < self._due_s:
            return
        self._due_s = now + CHECK_EVERY_S
        reading = self.read()
        if reading.used_bytes > self.limit_bytes(reading):
            victim = self.victim(keep_last=True)
            if victim is not None:
                self._unload(victim, "memory pressure")
        if self.idle_evict_s is None:
            return
        cutoff = time.monotonic() - self.idle_evict_s
        for slot in self.registry.loaded_slots():
            if self.registry.last_used(slot) < cutoff and self._is_evictable(slot):
                self._unload(slot, "idle")

    def evict_for_oom(self, running: int) -> bool:
        """A forward of `running` ran out of memory (inference thread): unload one other model."""
        victim = self.victim(exclude=running, keep_last=False)
        return victim is not None and self._unload(victim, "out of memory", wait=True)

    # -- choosing ------------------------------------------------------------------------------------
    def victim(self, *, exclude: int | None = None, keep_last: bool) -> int | None:
        """The least recently used evictable model, or None."""
        loaded = self.registry.loaded_slots()
        if keep_last and len(loaded) <= 1:
            return None
        candidates = [s for s in loaded if s != exclude and self._is_evictable(s)]
        return min(candidates, key=self.registry.last_used, default=None)

    def _is_evictable(self, slot: int) -> bool:
        return slot not in self.pinned and not self.registry.is_leased(slot) and not self._is_queued(slot)

    def _unload(self, slot: int, reason: str, *, wait: bool = False) -> bool:
        if not self.registry.try_unload(slot, wait=wait):
            return False
        self.evictions += 1
        log.info(
            "evicting model", extra={"model": self.registry.catalog.models[slot].sie_id, "reason": reason}
        )
        return True
