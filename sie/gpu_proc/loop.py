"""The device loop: drain request rings -> batcher -> inference thread -> result rings.

One thread runs this loop and is the only producer on every response ring of this device, so the
rings stay single-producer. It blocks only on the doorbell, which frontends ring after a push and
the inference thread rings after a batch; each wake drains everything (wakeups coalesce).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from sie.gpu_proc.batcher import Batcher, PendingItem
from sie.gpu_proc.cancel import Cancellations
from sie.gpu_proc.eviction import MemoryManager
from sie.gpu_proc.inference import Finished, InferenceThread
from sie.gpu_proc.registry import Registry
from sie.gpu_proc.results import result_messages
from sie.heap import HeapTrimmer
from sie.metrics.recorders import DeviceRecorder
from sie.shared_catalog import CatalogFeed
from sie.shm.control import ControlBlock, DeviceState
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.layout import (
    LayoutError,
    Op,
    ResultBlock,
    ResultKind,
    Status,
    decode_request,
    encode_result,
    error_result,
    kinds_of,
    lora_of,
)
from sie.shm.names import Namespace
from sie.shm.ring import Ring, RingMissing

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.25
# Batches are handed to the inference threads one per worker (`inference.depth`), never queued
# behind a running one: the next batch is formed the moment a worker frees, from everything that
# arrived meanwhile. A batch formed earlier and queued would be small and sealed too soon (measured
# at 32 clients on 2 cores with one worker: 84 -> ~105 items/s without the queue).
# How often per-model queue depths go to the control block (for /v1/models): often enough to watch
# a burst, rarely enough that a busy loop does not write shared memory per message.
QUEUE_DEPTH_EVERY_S = 0.005
# Result messages held for a frontend whose response ring is full. At the cap the loop stops taking
# that frontend's requests until it reads again; results of items already queued may still add a
# bounded number on top (the batcher's per-model cap).
MAX_OVERFLOW_MESSAGES = 1024


@dataclass(slots=True)
class RingPair:
    """This device's two rings with one frontend, at one generation."""

    frontend: int
    generation: int
    requests: Ring
    results: Ring
    wake: EventFd
    overflow: deque[np.ndarray] = field(default_factory=deque)

    def close(self) -> None:
        self.requests.close()
        self.results.close()


RETIRED_SWEEP_S = 0.5  # how often loaded models of retired slots are looked at


class DeviceLoop:
    def __init__(
        self,
        *,
        device_index: int,
        namespace: Namespace,
        control: ControlBlock,
        doorbell: Doorbell,
        eventfds: list[EventFd],
        registry: Registry,
        batcher: Batcher,
        inference: InferenceThread,
        supervisor_pid: int,
        memory: MemoryManager | None = None,
        stats: DeviceRecorder | None = None,
        catalog_feed: CatalogFeed | None = None,
    ) -> None:
        self.device_index = device_index
        self.namespace = namespace
        self.control = control
        self.doorbell = doorbell
        self.eventfds = eventfds
        self.registry = registry
        self.batcher = batcher
        self.inference = inference
        self.supervisor_pid = supervisor_pid
        self.memory = memory
        self.stats = stats
        self.catalog_feed = catalog_feed
        self.retired: set[int] = set()  # slots of models changed or removed while running
        self._retired_due_s = 0.0
        self.cancels = Cancellations(stats)
        self.pairs: dict[int, RingPair] = {}
        self.stopping = False
        self._depths_due_s = 0.0
        # Items pending at the last write; None: the first pass writes this device's depths, over
        # any a dead predecessor left.
        self._published_items: int | None = None
        self.heap = HeapTrimmer()

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        while not (self.stopping and self._is_idle()):
            self.control.heartbeat(self.device_index)
            self._refresh_pairs()
            self._drain_requests()
            self._observe()
            self._publish(self.inference.take_finished())
            self._tend_models(time.monotonic())
            self._dispatch()
            self._flush_overflow()
            self._publish_queue_depths(time.monotonic())
            self._tend_heap(time.monotonic())
            if os.getppid() != self.supervisor_pid:
                log.error("supervisor is gone; device exits")
                return
            self.doorbell.wait(self._wait_s())

    def _tend_heap(self, now: float) -> None:
        """Give freed memory back at a moment with nothing queued or running (see sie.heap)."""
        if self._is_idle():
            self.heap.idle(now)
        else:
            self.heap.busy()

    def _is_idle(self) -> bool:
        return (
            self.inference.in_flight == 0
            and len(self.batcher) == 0
            and not any(p.overflow for p in self.pairs.values())
        )

    def _wait_s(self) -> float:
        """How long to sleep: until a queued group's wait runs out, if a batch could go then.

        With the pipeline full only the inference thread's doorbell can change anything; waking on
        an already passed deadline would spin this thread and starve inference of the GIL.
        """
        if self.inference.in_flight < self.inference.depth and len(self.batcher):
            deadline = self.batcher.seconds_to_deadline(time.monotonic())
            if deadline is not None:
                return min(max(deadline, 0.0), IDLE_WAIT_S)
        return IDLE_WAIT_S

    def _publish_queue_depths(self, now: float) -> None:
        """Pending items per model into the control block. A fall goes out at once: frontends
        refuse a model whose published queue is full, and a stale full one would refuse requests
        that fit, with no new request left to wake this loop. A rise goes out at most every
        QUEUE_DEPTH_EVERY_S (the device itself refuses what does not fit), nothing while idle."""
        pending = len(self.batcher)
        fell = self._published_items is None or pending < self._published_items
        if not fell and (pending == 0 or now < self._depths_due_s):
            return
        n_models = len(self.registry.catalog)
        depths = np.fromiter((self.batcher.pending_items(s) for s in range(n_models)), np.uint32, n_models)
        self.control.set_queue_depths(self.device_index, depths)
        self._depths_due_s = now + QUEUE_DEPTH_EVERY_S
        self._published_items = pending

    # -- rings -----------------------------------------------------------------------------------
    def _refresh_pairs(self) -> None:
        """Follow the supervisor: a restarted frontend gets fresh rings under a new generation."""
        for frontend, wake in enumerate(self.eventfds):
            generation = self.control.pair_generation(self.device_index, frontend)
            current = self.pairs.get(frontend)
            if current is not None and current.generation == generation:
                continue
            if current is not None:
                current.close()
                del self.pairs[frontend]
                dropped = self.batcher.drop_source(frontend)
                log.info("frontend rings replaced", extra={"frontend": frontend, "dropped": dropped})
            try:
                self.pairs[frontend] = RingPair(
                    frontend,
                    generation,
                    Ring.attach(self.namespace.ring(self.device_index, frontend, generation, "req")),
                    Ring.attach(self.namespace.ring(self.device_index, frontend, generation, "resp")),
                    wake,
                )
            except RingMissing:
                continue  # superseded while we looked; the next pass sees the newer generation

    def _drain_requests(self) -> None:
        now = time.monotonic()
        admitted: set[int] = set()  # models given items this pass: each touched once, not per request
        for pair in self.pairs.values():
            # A frontend that does not read its results gets no new work (its requests wait in, and
            # then fill, its request ring: 503 QUEUE_FULL), so the overflow below stays bounded.
            while (
                len(pair.overflow) < MAX_OVERFLOW_MESSAGES
                and (message := pair.requests.try_pop()) is not None
            ):
                # Copy out and release at once: items may wait in the batcher for a while and
                # the ring must be free for the frontend meanwhile. Payloads are a few KiB.
                payload = message.view.copy()
                pair.requests.release(message)
                self._admit(pair, payload, now, admitted)
        for slot in admitted:
            self.registry.touch(slot)

    def _admit(self, pair: RingPair, payload: np.ndarray, now: float, admitted: set[int]) -> None:
        try:
            request = decode_request(payload)
        except (LayoutError, ValueError) as exc:
            log.error("undecodable request", extra={"frontend": pair.frontend, "error": str(exc)})
            return
        slot = request.model_slot
        if request.op == Op.CANCEL:
            self.cancels.add(pair.frontend, request.req_id, now)
            return
        if request.op == Op.LOAD_MODEL:
            self.registry.request_load(slot)
            return
        adapter = self.registry.get(slot)
        if adapter is None:
            self.registry.request_load(slot)  # unless loading, unloading, or failed in its cool-down
            self._send(pair, error_result(request.req_id, Status.MODEL_NOT_LOADED, "model is not loaded"))
            return
        lora = lora_of(request.config_key)
        if lora and (refusal := self.registry.check_lora(slot, lora)) is not None:
            self._send(pair, error_result(request.req_id, *refusal))
            return
        wanted = _wanted(request.output_mask)
        if not wanted or not wanted <= adapter.kinds:
            asked = ", ".join(k.name for k in kinds_of(request.output_mask)) or "nothing"
            self._send(pair, error_result(request.req_id, Status.INVALID, f"model cannot produce {asked}"))
            return
        if not self.batcher.try_add(request, pair.frontend, now):
            self._send(pair, error_result(request.req_id, Status.QUEUE_FULL, "model queue is full"))
            return
        admitted.add(slot)

    def _dispatch(self) -> None:
        # A group goes when it is full or its oldest item has waited max_batch_wait_ms, even on an
        # idle device: that wait is the knob that trades latency for fuller batches (0 = never wait).
        while self.inference.in_flight < self.inference.depth:
            batch = self.batcher.next_batch(time.monotonic(), idle=False)
            if batch is None:
                return
            if (batch := self.cancels.filter(batch)) is not None:  # drop items whose client left
                self.inference.submit(batch)

    # -- model lifecycle -------------------------------------------------------------------------
    def _tend_models(self, now: float) -> None:
        """Answer the queued items of models being unloaded; let the memory manager look around."""
        self._follow_catalog(now)
        for slot in self.registry.take_unloaded():
            self._refuse(self.batcher.drop_model(slot), "model was unloaded; retry shortly")
        if self.memory is not None:
            self.memory.check(now)

    def _follow_catalog(self, now: float) -> None:
        """A new catalog from the supervisor: retired models go once the items queued for them are done
        (a request that named one just before the change still loads and finishes on it)."""
        fresh = self.catalog_feed.changed() if self.catalog_feed is not None else None
        if fresh is not None:
            self.registry.catalog = fresh
            self.retired = set(range(len(fresh))) - set(fresh.active_slots())
            self._retired_due_s = now
            log.info("catalog changed", extra={"models": len(fresh.names()), "retired": len(self.retired)})
        if not self.retired or now < self._retired_due_s:
            return
        self._retired_due_s = now + RETIRED_SWEEP_S
        for slot in self.registry.loaded_slots():
            if slot in self.retired and self.batcher.pending_items(slot) == 0:
                self.registry.try_unload(slot)  # refused while a batch runs on it: next sweep

    def _refuse(self, items: list[PendingItem], message: str) -> None:
        """One MODEL_NOT_LOADED answer (503 MODEL_LOADING) per request among `items`."""
        for source, req_id in dict.fromkeys((item.source, item.req_id) for item in items):
            pair = self.pairs.get(source)
            if pair is not None:
                self._send(pair, error_result(req_id, Status.MODEL_NOT_LOADED, message))

    # -- results ---------------------------------------------------------------------------------
    def _publish(self, finished: list[Finished]) -> None:
        touched: set[int] = set()
        for done in finished:
            if self.stats is not None:
                _count_batch(self.stats, done)
            for frontend, req_id, payload in result_messages(done):
                pair = self.pairs.get(frontend)
                if pair is not None:
                    self._push(pair, payload, req_id, notify=False)
                    touched.add(frontend)
        for frontend in touched:
            self.pairs[frontend].wake.ring()

    def _send(self, pair: RingPair, block: ResultBlock, notify: bool = True) -> None:
        self._push(pair, encode_result(block), block.req_id, notify)

    def _push(self, pair: RingPair, payload: np.ndarray, req_id: int, notify: bool = True) -> None:
        if pair.overflow or not pair.results.try_push(payload, req_id):
            pair.overflow.append(payload)  # never block the loop on a slow frontend
        elif notify:
            pair.wake.ring()

    def _observe(self) -> None:
        """Statistics the loop owns: model loads seen in the control block, result overflow."""
        if self.stats is not None:
            self.stats.track_models()
            for frontend, pair in self.pairs.items():
                self.stats.overflow(frontend, len(pair.overflow))

    def _flush_overflow(self) -> None:
        for pair in self.pairs.values():
            sent = False
            while pair.overflow and pair.results.try_push(pair.overflow[0], _tag_of(pair.overflow[0])):
                pair.overflow.popleft()
                sent = True
            if sent:
                pair.wake.ring()

    def mark_up(self) -> None:
        self.control.heartbeat(self.device_index)  # the supervisor's stall clock starts now
        self.control.set_device_state(self.device_index, DeviceState.UP)

    def close(self) -> None:
        for pair in self.pairs.values():
            pair.close()
        self.pairs.clear()


def _count_batch(stats: DeviceRecorder, done: Finished) -> None:
    batch = done.batch
    if not batch.items:
        return
    first_ns = min(item.submit_ns for item in batch.items)
    stats.batch(
        model=batch.model_slot,
        items=len(batch.items),
        tokens=batch.n_tokens,
        max_length=batch.max_length,
        forward_s=(done.finished_ns - done.started_ns) / 1e9,
        queue_s=max(0, done.started_ns - first_ns) / 1e9,
        ok=done.outputs is not None,
    )


@functools.lru_cache(maxsize=256)
def _wanted(output_mask: int) -> frozenset[ResultKind]:
    return frozenset(kinds_of(output_mask))


def _tag_of(payload: np.ndarray) -> int:
    return int(payload[:8].view("<u8")[0])
