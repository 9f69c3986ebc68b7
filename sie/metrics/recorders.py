"""The writers of the statistics block, one per process kind, each touching only its own rows.

They sit on hot paths (a frontend per request, a device per batch), so each update is a handful
of numpy item increments on views made once: no locks, no allocation, no system calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

import numpy as np

from sie.metrics.block import StatsBlock
from sie.metrics.labels import (
    BATCH_SIZE_BUCKETS,
    BATCH_TOKENS_BUCKETS,
    LATENCY_BUCKETS_S,
    STAGE,
    bucket,
    code_index,
    route_index,
    status_index,
)
from sie.shm.control import ControlBlock, ModelState

log = logging.getLogger(__name__)


class FrontendRecorder:
    """One frontend's rows. Called from its event loop thread only."""

    def __init__(self, block: StatsBlock, frontend: int) -> None:
        v = block.v
        self.none_slot = block.none_slot
        self._requests = v["requests"][frontend]
        self._errors = v["errors"][frontend]
        self._items = v["items"][frontend]
        self._tokens = v["tokens"][frontend]
        self._disconnects = v["disconnects"][frontend]
        self.all_in_flight = v["in_flight"]  # every frontend's gauge, for the connection rebalancer
        self._in_flight = v["in_flight"][frontend : frontend + 1]
        self._in_flight[0] = 0  # a restarted frontend's predecessor took its requests with it
        self._rebalances = v["rebalances"][frontend : frontend + 1]
        self._stage_buckets = v["stage_buckets"][frontend]
        self._stage_sum = v["stage_sum_s"][frontend]
        self.started_total = 0  # this process's own count, for idle detection

    @property
    def in_flight(self) -> int:
        return int(self._in_flight[0])

    def request(
        self,
        *,
        route: str,
        model: int | None,
        status: int,
        code: str | None,
        stages_s: Mapping[str, float],
        disconnected: bool = False,
    ) -> None:
        m = self.none_slot if model is None else model
        self._requests[route_index(route), m, status_index(status)] += 1
        if code is not None:
            self._errors[m, code_index(code)] += 1
        if disconnected:
            self._disconnects[m] += 1
        for stage, seconds in stages_s.items():
            s = STAGE[stage]
            self._stage_buckets[s, m, bucket(LATENCY_BUCKETS_S, seconds)] += 1
            self._stage_sum[s, m] += seconds

    def started(self) -> None:
        self._in_flight[0] += 1
        self.started_total += 1

    def finished(self) -> None:
        self._in_flight[0] -= 1

    def rebalanced(self) -> None:
        self._rebalances[0] += 1

    def work(self, model: int, items: int, tokens: int) -> None:
        self._items[model] += items
        self._tokens[model] += tokens


class DeviceRecorder:
    """One device's rows. Called from its loop thread only (model loads are seen by polling)."""

    def __init__(
        self, block: StatsBlock, device: int, control: ControlBlock, *, instrumentation: bool = False
    ) -> None:
        v = block.v
        self.device = device
        self.instrumentation = instrumentation
        self._control = control
        self._size_buckets = v["batch_size_buckets"][device]
        self._token_buckets = v["batch_tokens_buckets"][device]
        self._batch_items = v["batch_items"][device]
        self._batch_tokens = v["batch_tokens"][device]
        self._padded = v["padded_tokens"][device]
        self._forward_s = v["forward_s"][device]
        self._failed = v["failed_batches"][device]
        self._cancelled = v["cancelled_items"][device]
        self._loads = v["loads"][device]
        self._load_failures = v["load_failures"][device]
        self._unloads = v["unloads"][device]
        self._load_s = v["load_s"][device]
        self._overflow = v["overflow"][device]
        self._pci = v["pci"][device]
        n_models = block.n_models
        self._seen = np.full(n_models, int(ModelState.AVAILABLE), np.uint32)
        self._seen_bytes = self._seen.tobytes()
        self._loading_since = np.zeros(n_models, np.float64)

    def batch(
        self,
        *,
        model: int,
        items: int,
        tokens: int,
        max_length: int,
        forward_s: float,
        queue_s: float,
        ok: bool,
    ) -> None:
        self._size_buckets[model, bucket(BATCH_SIZE_BUCKETS, items)] += 1
        self._token_buckets[model, bucket(BATCH_TOKENS_BUCKETS, tokens)] += 1
        self._batch_items[model] += items
        self._batch_tokens[model] += tokens
        self._padded[model] += items * max_length
        self._forward_s[model] += forward_s
        if not ok:
            self._failed[model] += 1
        if self.instrumentation:  # SIE_INSTRUMENTATION: one line per batch, as SIE logs it
            log.info(
                "batch",
                extra={
                    "model_slot": model,
                    "items": items,
                    "tokens": tokens,
                    "max_length": max_length,
                    "padding": round(1 - tokens / max(items * max_length, 1), 3),
                    "queue_ms": round(queue_s * 1000, 2),
                    "forward_ms": round(forward_s * 1000, 2),
                    "ok": ok,
                },
            )

    def cancelled(self, model: int, items: int) -> None:
        self._cancelled[model] += items

    def overflow(self, frontend: int, messages: int) -> None:
        self._overflow[frontend] = messages

    def set_pci(self, domain: int, bus: int, device: int) -> None:
        self._pci[1:] = (domain, bus, device)
        self._pci[0] = 1

    def track_models(self, now: float | None = None) -> None:
        """Count loads, failures and unloads from this device's model states in the control block.

        The registry publishes every state change there; polling them once per loop pass keeps
        the registry free of statistics and costs one small array comparison.
        """
        states = self._control.models["state"][self.device, : len(self._seen)]
        if states.tobytes() == self._seen_bytes:  # the usual case, in well under a microsecond
            return
        now = time.monotonic() if now is None else now
        for slot in np.flatnonzero(states != self._seen).tolist():
            self._transition(slot, ModelState(int(self._seen[slot])), ModelState(int(states[slot])), now)
        self._seen[:] = states
        self._seen_bytes = self._seen.tobytes()

    def _transition(self, slot: int, before: ModelState, after: ModelState, now: float) -> None:
        if after == ModelState.LOADING:
            self._loading_since[slot] = now
        elif after == ModelState.LOADED and before in (ModelState.LOADING, ModelState.AVAILABLE):
            self._loads[slot] += 1
            if before == ModelState.LOADING:
                self._load_s[slot] += now - self._loading_since[slot]
        elif after == ModelState.FAILED:
            self._load_failures[slot] += 1
        elif before == ModelState.LOADED and after in (ModelState.UNLOADING, ModelState.AVAILABLE):
            self._unloads[slot] += 1


class SupervisorRecorder:
    """The supervisor's section: pids, restarts and ring occupancy, refreshed on every tick."""

    def __init__(self, block: StatsBlock) -> None:
        self._v = block.v

    def processes(
        self,
        supervisor_pid: int,
        device_pids: Iterable[int],
        frontend_pids: Iterable[int],
        device_restarts: Iterable[int],
        frontend_restarts: Iterable[int],
    ) -> None:
        v = self._v
        v["supervisor_pid"][0] = supervisor_pid
        v["device_pids"][:] = list(device_pids)
        v["frontend_pids"][:] = list(frontend_pids)
        v["device_restarts"][:] = list(device_restarts)
        v["frontend_restarts"][:] = list(frontend_restarts)

    def ring(self, device: int, frontend: int, direction: int, used_bytes: int, pending: int) -> None:
        self._v["ring_used_bytes"][device, frontend, direction] = used_bytes
        self._v["ring_pending"][device, frontend, direction] = pending

    def ring_capacity(self, request_bytes: int, response_bytes: int) -> None:
        self._v["ring_capacity_bytes"][:] = (request_bytes, response_bytes)
