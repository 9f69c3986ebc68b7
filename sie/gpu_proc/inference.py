"""The inference thread: runs one batch at a time while the loop thread drains rings and publishes.

Torch releases the GIL inside its kernels, so the loop keeps forming the next batch and writing
results while a forward pass runs. Finished batches come back through a deque; the thread rings
the device doorbell so the loop wakes for them exactly like it wakes for new requests.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from sie.gpu_proc.batcher import Batch
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.registry import Registry
from sie.gpu_proc.runner import Runner
from sie.shm.layout import ResultKind, Status

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Finished:
    batch: Batch
    outputs: dict[ResultKind, Output] | None
    status: Status
    message: str
    started_ns: int
    finished_ns: int


class InferenceThread:
    def __init__(self, runner: Runner, registry: Registry, wake: Callable[[], None]) -> None:
        self._runner = runner
        self._registry = registry
        self._wake = wake
        self._inbox: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._finished: deque[Finished] = deque()
        self.in_flight = 0  # batches submitted and not yet taken back; loop thread only
        self._thread = threading.Thread(target=self._run, name="sie-inference", daemon=True)
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        self.in_flight += 1
        self._inbox.put(batch)

    def take_finished(self) -> list[Finished]:
        done: list[Finished] = []
        while self._finished:
            done.append(self._finished.popleft())
        self.in_flight -= len(done)
        return done

    def stop(self, timeout_s: float = 5.0) -> None:
        self._inbox.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while (batch := self._inbox.get()) is not None:
            self._finished.append(self._forward(batch))
            self._wake()

    def _forward(self, batch: Batch) -> Finished:
        started = time.monotonic_ns()
        adapter = self._registry.get(batch.key[0])
        if adapter is None:
            return Finished(batch, None, Status.MODEL_NOT_LOADED, "model is not loaded", started, started)
        try:
            outputs = self._runner.run(adapter, batch)
        except Exception as exc:
            status = Status.OUT_OF_MEMORY if _is_out_of_memory(exc) else Status.INFERENCE_ERROR
            log.exception("batch failed", extra={"status": status.name, "items": len(batch.items)})
            _release_cached_memory()
            return Finished(batch, None, status, f"{type(exc).__name__}: {exc}", started, time.monotonic_ns())
        return Finished(batch, outputs, Status.OK, "", started, time.monotonic_ns())


def _is_out_of_memory(exc: Exception) -> bool:
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"


def _release_cached_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
