"""The device loop: drain request rings -> batcher -> inference thread -> result rings.

One thread runs this loop and is the only producer on every response ring of this device, so the
rings stay single-producer. It blocks only on the doorbell, which frontends ring after a push and
the inference thread rings after a batch; each wake drains everything (wakeups coalesce).
"""

from __future__ import annotations

import logging
import os
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from sie.gpu_proc.batcher import Batch, Batcher
from sie.gpu_proc.inference import Finished, InferenceThread
from sie.gpu_proc.registry import Registry
from sie.shm.control import ControlBlock, DeviceState, ModelState
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.layout import (
    LayoutError,
    Op,
    ResultBlock,
    Status,
    decode_request,
    encode_result,
    error_result,
    kinds_of,
)
from sie.shm.names import Namespace
from sie.shm.ring import Ring, RingMissing

log = logging.getLogger(__name__)

IDLE_WAIT_S = 0.25
# Batches handed to the inference thread at once. One: the next batch is formed the moment the
# running one finishes, from everything that arrived meanwhile. A batch formed earlier and queued
# behind it would be small and sealed too soon, and the inference thread runs one batch at a time
# anyway, so queueing buys no overlap (measured at 32 clients on 2 cores: 84 -> ~105 items/s).
PIPELINE_DEPTH = 1
# How often per-model queue depths go to the control block (for /v1/models): often enough to watch
# a burst, rarely enough that a busy loop does not write shared memory per message.
QUEUE_DEPTH_EVERY_S = 0.005


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
        self.pairs: dict[int, RingPair] = {}
        self.stopping = False
        self._depths_due_s = 0.0
        self._depths_zero = True

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        while not (self.stopping and self._is_idle()):
            self.control.heartbeat(self.device_index)
            self._refresh_pairs()
            self._drain_requests()
            self._publish(self.inference.take_finished())
            self._dispatch()
            self._flush_overflow()
            self._publish_queue_depths(time.monotonic())
            if os.getppid() != self.supervisor_pid:
                log.error("supervisor is gone; device exits")
                return
            self.doorbell.wait(self._wait_s())

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
        if 0 < self.inference.in_flight < PIPELINE_DEPTH and len(self.batcher):
            deadline = self.batcher.seconds_to_deadline(time.monotonic())
            if deadline is not None:
                return min(max(deadline, 0.0), IDLE_WAIT_S)
        return IDLE_WAIT_S

    def _publish_queue_depths(self, now: float) -> None:
        """Pending items per model into the control block; the zeros go out at once once idle."""
        if len(self.batcher) == 0:
            if self._depths_zero:
                return
        elif now < self._depths_due_s:
            return
        n_models = len(self.registry.catalog)
        depths = np.fromiter((self.batcher.pending_items(s) for s in range(n_models)), np.uint32, n_models)
        self.control.set_queue_depths(self.device_index, depths)
        self._depths_due_s = now + QUEUE_DEPTH_EVERY_S
        self._depths_zero = len(self.batcher) == 0

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
        for pair in self.pairs.values():
            while (message := pair.requests.try_pop()) is not None:
                # Copy out and release at once: items may wait in the batcher for a while and
                # the ring must be free for the frontend meanwhile. Payloads are a few KiB.
                payload = message.view.copy()
                pair.requests.release(message)
                self._admit(pair, payload, now)

    def _admit(self, pair: RingPair, payload: np.ndarray, now: float) -> None:
        try:
            request = decode_request(payload)
        except (LayoutError, ValueError) as exc:
            log.error("undecodable request", extra={"frontend": pair.frontend, "error": str(exc)})
            return
        slot = request.model_slot
        if request.op == Op.LOAD_MODEL:
            self.registry.request_load(slot)
            return
        adapter = self.registry.get(slot)
        if adapter is None:
            if self.registry.state(slot) == ModelState.AVAILABLE:
                self.registry.request_load(slot)
            self._send(pair, error_result(request.req_id, Status.MODEL_NOT_LOADED, "model is not loaded"))
            return
        wanted = kinds_of(request.output_mask)
        if not wanted or not set(wanted) <= adapter.kinds:
            asked = ", ".join(k.name for k in wanted) or "nothing"
            self._send(pair, error_result(request.req_id, Status.INVALID, f"model cannot produce {asked}"))
            return
        if not self.batcher.try_add(request, pair.frontend, now):
            self._send(pair, error_result(request.req_id, Status.QUEUE_FULL, "model queue is full"))
            return
        self.control.touch_model(self.device_index, slot)

    def _dispatch(self) -> None:
        while self.inference.in_flight < PIPELINE_DEPTH:
            batch = self.batcher.next_batch(time.monotonic(), idle=self.inference.in_flight == 0)
            if batch is None:
                return
            self.inference.submit(batch)

    # -- results ---------------------------------------------------------------------------------
    def _publish(self, finished: list[Finished]) -> None:
        touched: set[int] = set()
        for done in finished:
            for frontend, block in _result_blocks(done):
                pair = self.pairs.get(frontend)
                if pair is not None:
                    self._send(pair, block, notify=False)
                    touched.add(frontend)
        for frontend in touched:
            self.pairs[frontend].wake.ring()

    def _send(self, pair: RingPair, block: ResultBlock, notify: bool = True) -> None:
        payload = encode_result(block)
        if pair.overflow or not pair.results.try_push(payload, block.req_id):
            pair.overflow.append(payload)  # never block the loop on a slow frontend
        elif notify:
            pair.wake.ring()

    def _flush_overflow(self) -> None:
        for pair in self.pairs.values():
            sent = False
            while pair.overflow and pair.results.try_push(pair.overflow[0], _tag_of(pair.overflow[0])):
                pair.overflow.popleft()
                sent = True
            if sent:
                pair.wake.ring()

    def mark_up(self) -> None:
        self.control.set_device_state(self.device_index, DeviceState.UP)

    def close(self) -> None:
        for pair in self.pairs.values():
            pair.close()
        self.pairs.clear()


def _tag_of(payload: np.ndarray) -> int:
    return int(payload[:8].view("<u8")[0])


def _result_blocks(done: Finished) -> list[tuple[int, ResultBlock]]:
    """Split a finished batch into one result message per (frontend, request, result kind)."""
    rows: dict[tuple[int, int], list[int]] = defaultdict(list)
    for row, item in enumerate(done.batch.items):
        rows[(item.source, item.req_id)].append(row)
    if done.outputs is None:
        return [(src, error_result(req_id, done.status, done.message)) for src, req_id in rows]
    batch: Batch = done.batch
    infer_us = min((done.finished_ns - done.started_ns) // 1000, 2**32 - 1)
    blocks = []
    for (source, req_id), picked in rows.items():
        items = [batch.items[r] for r in picked]
        queue_us = min(max(0, (done.started_ns - min(i.submit_ns for i in items)) // 1000), 2**32 - 1)
        item_index = np.fromiter((i.item_index for i in items), np.int32, len(items))
        for kind, output in done.outputs.items():
            part = output.take(picked)
            block = ResultBlock(
                req_id=req_id,
                kind=kind,
                item_index=item_index,
                item_status=np.zeros(len(items), np.uint8),
                values=part.values,
                dim=part.dim,
                row_offsets=part.row_offsets,
                indices=part.indices,
                queue_us=queue_us,
                infer_us=infer_us,
                batch_items=len(batch.items),
                batch_tokens=batch.n_tokens,
            )
            blocks.append((source, block))
    return blocks
