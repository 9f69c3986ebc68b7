"""Where models load and when a replica is added, read from a real control block."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from sie.frontend.devices import DeviceClient
from sie.frontend.placement import ReplicaWatch, least_loaded, loadable_devices
from sie.shm.control import ControlBlock, DeviceState, ModelState
from sie.shm.doorbell import EventFd
from sie.shm.names import Namespace

GIB = 1 << 30


@pytest.fixture
def control() -> Iterator[ControlBlock]:
    block = ControlBlock.create(f"/sie.placetest{uuid.uuid4().hex[:8]}.{os.getpid()}.ctl", 3, 1, 4)
    for device in range(3):
        block.set_device_state(device, DeviceState.UP)
    yield block
    block.close()
    block.unlink()


def test_the_device_using_the_smallest_share_of_its_memory_gets_the_load(control: ControlBlock) -> None:
    control.set_device_memory(0, 10 * GIB, 16 * GIB)  # 62% used
    control.set_device_memory(1, 2 * GIB, 16 * GIB)  # 12%
    control.set_device_memory(2, 1 * GIB, 4 * GIB)  # 25%
    assert least_loaded(control, [0, 1, 2]) == 1
    assert least_loaded(control, [0, 2]) == 2
    # Before any device measured, fewest models held decides.
    for device in (0, 1):
        control.set_device_memory(device, 0, 0)
    control.set_model_state(0, 3, ModelState.LOADED)
    assert least_loaded(control, [0, 1]) == 1


def test_near_equal_shares_go_to_the_device_holding_fewer_models(control: ControlBlock) -> None:
    # Device 0 holds a small model; device 1 holds none, yet read 0.2 % more of its memory in use
    # (two processes' resident sets, read at different moments, differ by more than a small model).
    control.set_device_memory(0, int(3.00 * GIB), 24 * GIB)
    control.set_device_memory(1, int(3.05 * GIB), 24 * GIB)
    control.set_model_state(0, 3, ModelState.LOADED)
    assert least_loaded(control, [0, 1]) == 1
    # A real difference in use still decides, whatever the models held.
    control.set_device_memory(1, 12 * GIB, 24 * GIB)
    assert least_loaded(control, [0, 1]) == 0


def test_a_failed_device_is_skipped_until_its_cool_down_passes(control: ControlBlock) -> None:
    control.set_model_state(0, 2, ModelState.FAILED, "OSError: bad")
    control.set_model_state(1, 2, ModelState.LOADING)
    assert loadable_devices(control, [0, 1, 2], 2, cooldown_s=60) == [2]
    assert loadable_devices(control, [0, 1, 2], 2, cooldown_s=0) == [0, 2]


def test_replica_only_after_every_holder_stayed_deep_long_enough(control: ControlBlock) -> None:
    watch = ReplicaWatch(queue_depth=8, after_s=5.0)
    control.set_model_state(0, 1, ModelState.LOADED)
    control.set_queue_depths(0, np.array([0, 9, 0, 0], np.uint32))
    up = [0, 1, 2]
    assert watch.deep_models(control, up, now=100.0) == []  # deep, but only just
    assert watch.deep_models(control, up, now=104.0) == []
    control.set_queue_depths(0, np.array([0, 3, 0, 0], np.uint32))  # drained meanwhile: the clock resets
    assert watch.deep_models(control, up, now=104.5) == []
    control.set_queue_depths(0, np.array([0, 9, 0, 0], np.uint32))
    assert watch.deep_models(control, up, now=105.0) == []
    assert watch.deep_models(control, up, now=110.0) == [1]
    assert watch.deep_models(control, up, now=111.0) == []  # asked once; wait again for a third
    assert watch.deep_models(control, [0], now=120.0) == []  # no other device to place it on
    assert ReplicaWatch(queue_depth=0, after_s=0).deep_models(control, up, now=200.0) == []


def test_client_prefers_states_and_allows_retry_after_cool_down(control: ControlBlock) -> None:
    wake = EventFd.create()
    namespace = Namespace(control.name.split(".")[1], os.getpid())
    client = DeviceClient(namespace, control, 0, wake, load_failure_cooldown_s=0.2)
    try:
        control.set_model_state(0, 0, ModelState.UNLOADING)
        assert client.model_state(0) == ModelState.UNLOADING  # beats available elsewhere
        control.set_model_state(0, 0, ModelState.LOADED)
        assert client.model_state(0) == ModelState.LOADED
        for device in range(3):
            control.set_model_state(device, 1, ModelState.FAILED, f"OSError: try {device}")
        assert client.model_state(1) == ModelState.FAILED
        assert client.model_error(1) == "OSError: try 2"  # the latest failure
        assert not client.can_retry_load(1)
        deadline = time.monotonic() + 5
        while not client.can_retry_load(1):
            assert time.monotonic() < deadline, "cool-down never ended"
            time.sleep(0.02)
    finally:
        wake.close()
