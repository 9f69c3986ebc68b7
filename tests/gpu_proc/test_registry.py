"""A device's model lifecycle: load, lease, unload, failed-load cool-down; fakes for the weights."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sie.gpu_proc.registry import Registry, weight_file_bytes
from sie.shm.control import ControlBlock, ModelState

from .lifecycle_fakes import MIB, FakeProbe, catalog_of, fake_loader, new_control, wait_state

NAMES = ["m/a", "m/b", "m/c"]


@pytest.fixture
def control() -> Iterator[ControlBlock]:
    block = new_control(len(NAMES))
    yield block
    block.close()
    block.unlink()


def make_registry(tmp_path: Path, control: ControlBlock, probe: FakeProbe, **kw: object) -> Registry:
    fail = kw.pop("fail", None)
    return Registry(
        catalog_of(tmp_path, NAMES),
        control,
        0,
        "cpu",
        loader=fake_loader(probe, fail=fail),  # type: ignore[arg-type]
        release=probe.release,
        **kw,  # type: ignore[arg-type]
    )


def test_load_lease_unload_cycle(tmp_path: Path, control: ControlBlock) -> None:
    probe = FakeProbe(capacity=1 << 30)
    registry = make_registry(tmp_path, control, probe)
    try:
        assert registry.request_load(0)
        assert not registry.request_load(0)  # already loading: no second load
        wait_state(control, 0, ModelState.LOADED)
        assert control.model_usage(0, 0).memory_bytes == 10 * MIB and registry.loaded_slots() == [0]
        with registry.lease(0) as adapter:
            assert adapter is not None
            assert not registry.try_unload(0)  # a batch is running on it
        assert registry.last_used(0) > 0
        assert registry.try_unload(0, wait=True)
        assert probe.live["m/a"].closed and probe.releases == 1
        assert control.model_state(0, 0) == ModelState.AVAILABLE
        assert control.model_usage(0, 0).memory_bytes == 0
        assert registry.take_unloaded() == [0] and registry.take_unloaded() == []
        with registry.lease(0) as gone:
            assert gone is None
        assert registry.request_load(0)  # a later request loads it again
        wait_state(control, 0, ModelState.LOADED)
        assert control.model_usage(0, 0).loads == 2
    finally:
        registry.close()


def test_unload_off_thread_passes_through_unloading(tmp_path: Path, control: ControlBlock) -> None:
    probe = FakeProbe(capacity=1 << 30)
    registry = make_registry(tmp_path, control, probe)
    try:
        registry.request_load(1)
        wait_state(control, 1, ModelState.LOADED)
        seen: list[ModelState] = []
        registry.on_unload = lambda slot, adapter: seen.append(control.model_state(0, slot))
        assert registry.try_unload(1)
        wait_state(control, 1, ModelState.AVAILABLE)
        assert seen == [ModelState.UNLOADING]
    finally:
        registry.close()


def test_failed_load_is_refused_until_its_cool_down_passes(tmp_path: Path, control: ControlBlock) -> None:
    probe = FakeProbe(capacity=1 << 30)
    registry = make_registry(tmp_path, control, probe, fail={"m/c"}, failure_cooldown_s=0.3)
    try:
        registry.request_load(2)
        wait_state(control, 2, ModelState.FAILED)
        assert control.model_error(0, 2) == "OSError: no weights in m__c"
        failed_at = time.monotonic()
        assert not registry.request_load(2)
        deadline = time.monotonic() + 10
        while not registry.request_load(2):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert time.monotonic() - failed_at >= 0.25
        wait_state(control, 2, ModelState.FAILED)  # still broken: failed again, a new cool-down
    finally:
        registry.close()


def test_expected_size_is_the_largest_weight_format(tmp_path: Path) -> None:
    catalog = catalog_of(tmp_path, ["w/x"])
    folder = tmp_path / "w__x"
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 600)
    (folder / "config.json").write_bytes(b"{}" * 5000)
    assert weight_file_bytes(catalog.models[0]) == 1000
