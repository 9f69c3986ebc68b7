"""The inference threads: run batches while the loop thread drains rings and publishes.
(A light CPU batch on an idle device runs on the loop thread instead; see `InferenceThread.submit`.)

Torch releases the GIL inside its kernels, so the loop keeps forming the next batch and writing
results while a forward pass runs. Finished batches come back through a deque; the thread rings
the device doorbell so the loop wakes for them exactly like it wakes for new requests.

A GPU device runs one batch at a time. A CPU device runs up to two at once, each on its share of
the cores: a forward split over the cores by OpenMP stalls at every barrier while a frontend holds
one of them, and two forwards on a core each never wait on each other. Measured on the 2-core VM
(MiniLM, 32 clients): 13-17 % more items/s. Two batches share an adapter only when it says its
forward keeps no state between calls (`Adapter.concurrent_forwards`); a model with LoRA adapters
runs one batch at a time anyway, since the active adapter is the model's state.

A lone batch always goes to the first worker, and a second worker that has been idle for
HELPER_IDLE_S ends its thread (a fresh one starts with its next batch). libgomp keeps a thread's
OpenMP team for as long as the thread lives, and once the teams of all threads hold more threads
than there are cores it stops spinning between parallel regions and sleeps on a futex instead: a
wake-up per region, hundreds per forward. On the 2-core VM a second idle team made a MiniLM-shaped
forward of 48 tokens take 8.8 ms instead of 5.5 (scripts/bench_openmp_teams.py). The device's loop
and loader threads form no team at all (sie.gpu_proc.threads.no_openmp_team).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sie.gpu_proc.batcher import Batch, PendingItem
from sie.gpu_proc.lora import LoraMissing
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.recovery import run_recovering
from sie.gpu_proc.registry import Registry
from sie.gpu_proc.runner import Runner
from sie.shm.layout import ResultKind, Status, lora_of

log = logging.getLogger(__name__)

# A second worker idle this long ends its thread, and with it the thread's OpenMP team.
HELPER_IDLE_S = 0.5


@dataclass(frozen=True, slots=True)
class Finished:
    batch: Batch
    outputs: dict[ResultKind, Output] | None
    status: Status
    message: str
    started_ns: int
    finished_ns: int
    # Items refused after out-of-memory recovery (`batch` then holds only the ones that ran).
    failed: tuple[PendingItem, ...] = ()


class _Worker:
    """One inference thread and its inbox; the thread may end when idle and start again."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.inbox: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()  # between handing a batch over and the thread ending
        self.assigned = 0  # batches handed over and not yet taken back; loop thread only


class InferenceThread:
    def __init__(
        self,
        runner: Runner,
        registry: Registry,
        wake: Callable[[], None],
        evict_other: Callable[[int], bool] = lambda running: False,
        workers: int = 1,
    ) -> None:
        self._runner = runner
        self._registry = registry
        self._wake = wake
        self._evict_other = evict_other  # out of memory: unload a model other than this one
        # Each with the worker that ran it, None for a light batch run on the loop's thread.
        self._finished: deque[tuple[Finished, _Worker | None]] = deque()
        self.in_flight = 0  # batches submitted and not yet taken back; loop thread only
        self._workers = [_Worker(index) for index in range(max(1, workers))]
        # In-flight batches, per model slot, through adapters that run one batch at a time.
        self._solo: Counter[int] = Counter()
        self._running = 0  # forwards running now, for each one's share of the cores
        self._running_lock = threading.Lock()
        self._exclusive: dict[int, threading.Lock] = {}  # per model slot, for adapters with state
        self._start(self._workers[0])

    @property
    def depth(self) -> int:
        """Batches the loop may hand over at once: one per worker, but one in all while a batch of
        an adapter that runs alone is in flight, since a second batch of its model would wait
        sealed when it could still grow."""
        return 1 if self._solo.total() else len(self._workers)

    def submit(self, batch: Batch) -> None:
        """Run `batch`: on this thread when it is light and nothing else runs, else queue it.

        A light CPU forward takes a few milliseconds of one core at most; handing it to the
        inference thread costs two thread wakeups (there and back) and a GIL hand-off each way,
        which add latency to every request on an idle device and CPU to every batch under load.
        Run here, its result is published on the loop's next turn (the self-ring makes the wait
        return at once); rings are not drained meanwhile, for no longer than that forward.
        """
        self.in_flight += 1
        adapter = self._registry.get(batch.model_slot)
        if self._runs_alone(adapter):
            self._solo[batch.model_slot] += 1
        if self.in_flight == 1 and adapter is not None and self._runner.is_light(adapter, batch):
            self._finished.append((self._forward(batch), None))
            self._wake()
            return
        # The first free worker, so a lone batch always runs where the OpenMP team already is.
        worker = min(self._workers, key=lambda w: (w.assigned, w.index))
        worker.assigned += 1
        with worker.lock:
            if worker.thread is None:
                self._start(worker)
            worker.inbox.put(batch)

    def take_finished(self) -> list[Finished]:
        done: list[Finished] = []
        while self._finished:
            finished, worker = self._finished.popleft()
            done.append(finished)
            if worker is not None:
                worker.assigned -= 1
            if self._solo[finished.batch.model_slot] > 0:
                self._solo[finished.batch.model_slot] -= 1
        self.in_flight -= len(done)
        return done

    def stop(self, timeout_s: float = 5.0) -> None:
        threads = []
        for worker in self._workers:
            with worker.lock:
                if worker.thread is not None:
                    threads.append(worker.thread)
                    worker.inbox.put(None)
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def live_threads(self) -> int:
        """Worker threads running now (a second worker's ends after HELPER_IDLE_S idle)."""
        return sum(worker.thread is not None and worker.thread.is_alive() for worker in self._workers)

    def _start(self, worker: _Worker) -> None:
        worker.thread = threading.Thread(target=self._run, args=(worker,), name="sie-inference", daemon=True)
        worker.thread.start()

    def _run(self, worker: _Worker) -> None:
        idle_s = None if worker.index == 0 else HELPER_IDLE_S
        while True:
            try:
                batch = worker.inbox.get(timeout=idle_s)
            except queue.Empty:
                with worker.lock:
                    if worker.inbox.empty():  # nothing handed over meanwhile: end, team and all
                        worker.thread = None
                        return
                continue
            if batch is None:
                return
            self._finished.append((self._forward(batch), worker))
            self._wake()

    def _forward(self, batch: Batch) -> Finished:
        started = time.monotonic_ns()
        slot = batch.model_slot
        with self._registry.lease(slot) as adapter:  # no unload while this batch runs
            if adapter is None:
                return Finished(batch, None, Status.MODEL_NOT_LOADED, "model is not loaded", started, started)
            lora = lora_of(batch.key.config_key)
            try:
                with (
                    self._one_at_a_time(slot, adapter),
                    self._registry.lora_applied(slot, lora),  # batches never mix adapters
                    self._counted() as sharing,
                ):
                    started = time.monotonic_ns()  # a wait for the model's turn is queue time
                    got = run_recovering(
                        lambda part: self._runner.run(adapter, part, sharing),
                        batch,
                        free_cache=_release_cached_memory,
                        evict_other=lambda: self._evict_other(slot),
                    )
            except LoraMissing:  # dropped for another adapter since admission: load it again
                refusal = self._registry.check_lora(slot, lora) or (Status.LORA_LOADING, "LoRA is loading")
                return Finished(batch, None, refusal[0], refusal[1], started, time.monotonic_ns())
            except Exception as exc:
                log.exception("batch failed", extra={"items": len(batch.items)})
                message = f"{type(exc).__name__}: {exc}"
                return Finished(batch, None, Status.INFERENCE_ERROR, message, started, time.monotonic_ns())
        finished = time.monotonic_ns()
        if got.done is None:
            return Finished(batch, None, Status.OUT_OF_MEMORY, got.message, started, finished)
        return Finished(got.done, got.outputs, Status.OK, got.message, started, finished, tuple(got.failed))

    def _one_at_a_time(self, slot: int, adapter: object) -> contextlib.AbstractContextManager[object]:
        if not self._runs_alone(adapter):
            return contextlib.nullcontext()
        return self._exclusive.setdefault(slot, threading.Lock())

    def _runs_alone(self, adapter: object) -> bool:
        """Whether the adapter's batches must run one at a time here: several workers, and an adapter
        that does not say its forward keeps no state (`Adapter.concurrent_forwards`; None does not)."""
        return len(self._workers) > 1 and not getattr(adapter, "concurrent_forwards", False)

    @contextlib.contextmanager
    def _counted(self) -> Iterator[int]:
        """The forwards running now, this one included, while the body runs."""
        with self._running_lock:
            self._running += 1
            sharing = self._running
        try:
            yield sharing
        finally:
            with self._running_lock:
                self._running -= 1


def _release_cached_memory() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
