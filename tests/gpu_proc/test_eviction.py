"""Which model goes when: LRU by use, never pinned, busy or (under pressure) the last one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sie.gpu_proc.eviction import CHECK_EVERY_S, MemoryManager
from sie.gpu_proc.memory import CpuProbe, MemoryReading
from sie.gpu_proc.registry import Registry
from sie.shm.control import ControlBlock, ModelState

from .lifecycle_fakes import MIB, FakeProbe, catalog_of, fake_loader, new_control, wait_state

NAMES = ["m/a", "m/b", "m/c", "m/d"]
A, B, C, D = range(4)


@pytest.fixture
def control() -> Iterator[ControlBlock]:
    block = new_control(len(NAMES))
    yield block
    block.close()
    block.unlink()


class Box:
    """A registry of 20 MiB fake models on a 100 MiB device whose threshold is 50%: two fit."""

    def __init__(self, tmp_path: Path, control: ControlBlock, **manager: object) -> None:
        self.control = control
        self.probe = FakeProbe(capacity=100 * MIB)
        self.queued: set[int] = set()
        self.registry = Registry(
            catalog_of(tmp_path, NAMES),
            control,
            0,
            "cpu",
            loader=fake_loader(self.probe, size=20 * MIB),  # type: ignore[arg-type]
            release=self.probe.release,
        )
        self.manager = MemoryManager(
            self.registry,
            self.probe,
            control,
            0,
            threshold_percent=50,
            is_queued=lambda slot: slot in self.queued,
            **manager,  # type: ignore[arg-type]
        )
        self.registry.before_load = self.manager.make_room
        self.registry._known_bytes = dict.fromkeys(range(len(NAMES)), 20 * MIB)  # as if measured before

    def load(self, slot: int) -> None:
        assert self.registry.request_load(slot)
        wait_state(self.control, slot, ModelState.LOADED)

    def loaded(self) -> set[int]:
        return {s for s in range(len(NAMES)) if self.control.model_state(0, s) == ModelState.LOADED}

    def use(self, slot: int) -> None:
        with self.registry.lease(slot) as adapter:
            assert adapter is not None

    def close(self) -> None:
        self.registry.close()


@pytest.fixture
def box(tmp_path: Path, control: ControlBlock) -> Iterator[Box]:
    made = Box(tmp_path, control)
    yield made
    made.close()


def test_a_load_evicts_the_least_recently_used_not_the_first_loaded(box: Box) -> None:
    box.load(A)
    box.load(B)
    box.use(A)  # A was loaded first but used last: B is now the least recently used
    box.load(C)
    assert box.loaded() == {A, C}
    assert box.control.model_state(0, B) == ModelState.AVAILABLE
    assert box.probe.read().used_bytes <= 50 * MIB
    box.load(D)  # A (used before C's load) goes next
    assert box.loaded() == {C, D}
    assert box.manager.evictions == 2


def test_queued_or_running_models_are_never_evicted(box: Box) -> None:
    box.load(A)
    box.load(B)
    box.queued.add(A)  # items wait for A
    with box.registry.lease(B):  # a batch runs on B
        box.load(C)  # nothing may go: loads over the threshold, with a warning
    assert box.loaded() == {A, B, C}
    assert box.manager.evictions == 0


def test_pinned_models_stay(tmp_path: Path, control: ControlBlock) -> None:
    box = Box(tmp_path, control, pinned=[A])
    try:
        box.load(A)
        box.load(B)
        box.use(A)
        box.use(B)  # A is the least recently used, but preloaded
        box.load(C)
        assert box.loaded() == {A, C}
    finally:
        box.close()


def test_pressure_check_unloads_one_per_second_but_never_the_last(box: Box) -> None:
    box.load(A)
    box.load(B)
    box.probe.base = 45 * MIB  # something else grew: 85 MiB used, over the 50 MiB line
    box.manager.check(now=100.0)
    wait_state(box.control, A, ModelState.AVAILABLE)
    assert box.control.device_memory(0) == (85 * MIB, 100 * MIB)  # published for placement
    box.manager.check(now=100.5)  # not yet a second: nothing more
    assert box.loaded() == {B}
    box.manager.check(now=100.0 + CHECK_EVERY_S)
    assert box.loaded() == {B}  # still over, but it is the last model


def test_idle_models_are_unloaded_except_pinned(tmp_path: Path, control: ControlBlock) -> None:
    box = Box(tmp_path, control, idle_evict_s=0.2, pinned=[B])
    try:
        box.load(A)
        box.load(B)
        box.manager.check(now=0.0)
        assert box.loaded() == {A, B}  # just loaded: not idle
        deadline = time.monotonic() + 10
        while A in box.loaded():
            assert time.monotonic() < deadline, "idle model never unloaded"
            box.manager.check(now=time.monotonic() + 1000)  # `now` only paces the checks
            time.sleep(0.02)
        assert box.loaded() == {B}
    finally:
        box.close()


def test_out_of_memory_evicts_another_model_than_the_running_one(box: Box) -> None:
    box.load(A)
    box.load(B)
    box.use(B)  # A is least recently used; B runs out of memory
    assert box.manager.evict_for_oom(running=B)
    assert box.loaded() == {B}
    assert not box.manager.evict_for_oom(running=B)  # nothing else left


def test_a_bounded_cpu_device_counts_what_its_models_hold(box: Box) -> None:
    """Not the process's RSS (this test process alone is far above the 100 MiB bound): the bytes
    each loaded model holds, until its unload has freed them."""
    probe = CpuProbe(capacity_bytes=100 * MIB, held_bytes=box.registry.held_bytes)
    box.manager.probe = probe
    assert probe.read() == MemoryReading(0, 100 * MIB)
    box.load(A)
    box.load(B)
    assert probe.read() == MemoryReading(40 * MIB, 100 * MIB)
    box.use(A)
    box.load(C)  # 40 + 20 MiB would pass the 50 MiB line: B, the least recently used, goes
    assert box.loaded() == {A, C} and probe.read().used_bytes == 40 * MIB
    assert box.registry.try_unload(A, wait=True)
    assert probe.read().used_bytes == 20 * MIB


def test_an_unbounded_cpu_device_measures_its_resident_memory() -> None:
    reading = CpuProbe(held_bytes=lambda: 1).read()
    rss = psutil.Process().memory_info().rss
    assert abs(reading.used_bytes - rss) < 16 * MIB
    assert reading.capacity_bytes == pytest.approx(rss + psutil.virtual_memory().available, rel=0.05)
