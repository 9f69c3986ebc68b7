"""Out-of-memory recovery with an injected allocation failure: the same batch again, halves, eviction,
then refusal."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.inference import Finished, InferenceThread
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.recovery import is_out_of_memory, run_recovering
from sie.gpu_proc.registry import Registry
from sie.gpu_proc.results import result_messages
from sie.shm.control import ModelState
from sie.shm.layout import Op, ResultKind, Status, decode_result

from .lifecycle_fakes import FakeProbe, catalog_of, fake_loader, new_control, wait_state


def batch_of(lengths: list[int], requests: list[int] | None = None) -> Batch:
    """Items whose first token is their index, so outputs can be traced back to items."""
    requests = requests or [1] * len(lengths)
    items = [
        PendingItem(0, req, i, np.full(n, i, np.int32), None, 0.0, 0)
        for i, (n, req) in enumerate(zip(lengths, requests, strict=True))
    ]
    return Batch(GroupKey(0, int(Op.ENCODE), 1, 0, 0), items, sum(lengths), max(lengths), 0.0)


class Device:
    """A forward that fails to allocate above `budget` tokens; the budget grows on eviction."""

    def __init__(self, budget: int, freed_by_eviction: int = 0, transient: int = 0) -> None:
        self.budget = budget
        self.transient = transient  # forwards that fail whatever their size (fragmentation)
        self.freed = freed_by_eviction
        self.calls: list[int] = []
        self.frees = 0
        self.evictions = 0

    def forward(self, batch: Batch) -> dict[ResultKind, Output]:
        self.calls.append(len(batch.items))
        if self.transient:
            self.transient -= 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB")
        if batch.n_tokens > self.budget:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        rows = np.array([[float(item.input_ids[0])] for item in batch.items], np.float32)
        return {ResultKind.DENSE: Output(ResultKind.DENSE, rows)}

    def free_cache(self) -> None:
        self.frees += 1

    def evict(self) -> bool:
        if not self.freed:
            return False
        self.evictions += 1
        self.budget += self.freed
        self.freed = 0
        return True


def run(device: Device, batch: Batch):  # type: ignore[no-untyped-def]
    return run_recovering(device.forward, batch, free_cache=device.free_cache, evict_other=device.evict)


def test_a_batch_that_fits_runs_once() -> None:
    device = Device(budget=100)
    got = run(device, batch_of([10, 10, 10]))
    assert device.calls == [3] and device.frees == 0 and got.failed == []


def test_out_of_memory_retries_in_halves_and_keeps_every_row_with_its_item() -> None:
    device = Device(budget=25)
    got = run(device, batch_of([10, 10, 10, 10]))
    assert device.calls == [4, 4, 2, 2] and device.frees == 2
    assert got.failed == [] and got.done is not None and got.outputs is not None
    assert [item.item_index for item in got.done.items] == [0, 1, 2, 3]
    assert got.outputs[ResultKind.DENSE].values[:, 0].tolist() == [0, 1, 2, 3]


def test_a_single_item_too_big_evicts_another_model_then_runs() -> None:
    device = Device(budget=15, freed_by_eviction=100)
    got = run(device, batch_of([10, 40]))
    assert device.calls == [2, 2, 1, 1, 1] and device.evictions == 1
    assert got.failed == [] and got.outputs is not None
    assert got.outputs[ResultKind.DENSE].values[:, 0].tolist() == [0, 1]


@pytest.mark.parametrize("n_items", [1, 4])
def test_a_failure_the_freed_cache_cures_runs_the_batch_again_whole(n_items: int) -> None:
    device = Device(budget=100, transient=1)
    got = run(device, batch_of([10] * n_items))
    assert device.calls == [n_items, n_items] and device.frees == 1 and device.evictions == 0
    assert got.failed == [] and got.outputs is not None
    assert got.outputs[ResultKind.DENSE].values[:, 0].tolist() == list(range(n_items))


def test_only_the_items_that_never_fit_are_refused() -> None:
    device = Device(budget=15)  # nothing to evict
    batch = batch_of([10, 10, 40], requests=[7, 7, 8])
    got = run(device, batch)
    assert [item.item_index for item in got.failed] == [2]
    assert got.done is not None and [item.item_index for item in got.done.items] == [0, 1]
    assert "out of memory" in got.message.lower()
    finished = Finished(got.done, got.outputs, Status.OK, got.message, 0, 1000, tuple(got.failed))
    blocks = {req_id: decode_result(message) for _, req_id, message in result_messages(finished)}
    assert blocks[8].status == Status.OUT_OF_MEMORY  # -> 503 RESOURCE_EXHAUSTED, Retry-After 5
    assert blocks[7].status == Status.OK and blocks[7].item_index.tolist() == [0, 1]


def test_nothing_fits_means_no_outputs() -> None:
    got = run(Device(budget=5), batch_of([10]))
    assert got.done is None and got.outputs is None and len(got.failed) == 1


def test_other_errors_are_not_retried() -> None:
    calls: list[int] = []

    def broken(batch: Batch) -> dict[ResultKind, Output]:
        calls.append(1)
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape"):
        run_recovering(broken, batch_of([3, 3]), free_cache=lambda: None, evict_other=lambda: False)
    assert calls == [1]


def test_what_counts_as_out_of_memory() -> None:
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
    )
    assert is_out_of_memory(MemoryError())
    assert not is_out_of_memory(RuntimeError("expected scalar type Float"))


def test_the_inference_thread_answers_what_fits_and_survives(tmp_path: Path) -> None:
    control = new_control(2)
    probe = FakeProbe(capacity=1 << 30)
    catalog = catalog_of(tmp_path, ["m/a", "m/b"])
    registry = Registry(catalog, control, 0, "cpu", loader=fake_loader(probe))  # type: ignore[arg-type]
    device = Device(budget=15)
    # Never light, so every batch takes the inference thread (the inline path is tested below).
    runner: Any = SimpleNamespace(
        run=lambda adapter, batch, sharing=1: device.forward(batch), is_light=lambda a, b: False
    )
    evicted: list[int] = []
    woken = threading.Event()
    thread = InferenceThread(runner, registry, wake=woken.set, evict_other=lambda s: bool(evicted.append(s)))
    try:
        registry.request_load(0)
        wait_state(control, 0, ModelState.LOADED)
        thread.submit(batch_of([10, 40], requests=[1, 2]))
        assert woken.wait(10)
        (done,) = thread.take_finished()
        assert done.status == Status.OK and [i.req_id for i in done.failed] == [2]
        assert evicted == [0]  # asked to evict another model than slot 0
        woken.clear()
        thread.submit(batch_of([10]))  # and it still serves
        assert woken.wait(10)
        assert thread.take_finished()[0].outputs is not None
    finally:
        thread.stop()
        registry.close()
        control.close()
        control.unlink()


def test_a_light_batch_on_an_idle_device_runs_on_the_submitting_thread(tmp_path: Path) -> None:
    control = new_control(1)
    registry = Registry(
        catalog_of(tmp_path, ["m/a"]), control, 0, "cpu", loader=fake_loader(FakeProbe(1 << 30))
    )  # type: ignore[arg-type]
    release = threading.Event()
    ran_on: list[str] = []

    def forward(adapter: Any, batch: Batch, sharing: int = 1) -> dict[ResultKind, Output]:
        ran_on.append(threading.current_thread().name)
        if len(batch.items) > 1:  # the heavy one: holds the inference thread until released
            release.wait(10)
        return Device(budget=1000).forward(batch)

    woken = threading.Event()
    runner: Any = SimpleNamespace(run=forward, is_light=lambda adapter, batch: len(batch.items) == 1)
    thread = InferenceThread(runner, registry, wake=woken.set)
    try:
        registry.request_load(0)
        wait_state(control, 0, ModelState.LOADED)
        thread.submit(batch_of([10]))  # light, nothing running: done before submit returns
        assert ran_on == [threading.current_thread().name] and woken.is_set()
        assert [d.status for d in thread.take_finished()] == [Status.OK] and thread.in_flight == 0
        woken.clear()
        thread.submit(batch_of([10, 20], requests=[1, 2]))  # heavy: the inference thread
        thread.submit(batch_of([10]))  # light, but one is in flight: queued behind it
        assert ran_on[1:] in ([], ["sie-inference"])
        release.set()
        deadline = time.monotonic() + 10
        done: list[Finished] = []
        while len(done) < 2 and time.monotonic() < deadline:
            woken.wait(1)
            woken.clear()
            done += thread.take_finished()
        assert [len(d.batch.items) for d in done] == [2, 1]
        assert ran_on[1:] == ["sie-inference", "sie-inference"]
    finally:
        thread.stop()
        registry.close()
        control.close()
        control.unlink()
