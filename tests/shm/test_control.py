from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from sie.shm.control import (
    DEVICE,
    ERROR_BYTES,
    HEADER,
    MAGIC,
    MODEL,
    ControlBlock,
    DeviceState,
    ModelState,
    ModelUsage,
)


@pytest.fixture
def control() -> Iterator[ControlBlock]:
    block = ControlBlock.create(f"/sie.ctltest{uuid.uuid4().hex[:8]}.{os.getpid()}.ctl", 2, 3, 4)
    yield block
    block.close()
    block.unlink()


def test_attached_view_sees_owner_writes(control: ControlBlock) -> None:
    reader = ControlBlock.attach(control.name)
    assert (reader.n_devices, reader.n_frontends) == (2, 3)
    control.set_device_state(1, DeviceState.UP)
    control.set_pair_generation(1, 2, 7)
    assert control.bump_device_generation(1) == 1
    control.set_draining()
    assert reader.device_state(1) == DeviceState.UP and reader.device_state(0) == DeviceState.DOWN
    assert reader.pair_generation(1, 2) == 7 and reader.pair_generation(0, 2) == 0
    assert reader.device_generation(1) == 1 and reader.is_draining
    reader.close()


def test_model_state_and_error(control: ControlBlock) -> None:
    control.set_model_state(0, 3, ModelState.FAILED, "OSError: " + "é" * 1000)
    assert control.model_state(0, 3) == ModelState.FAILED
    assert control.model_error(0, 3).startswith("OSError: ééé")
    assert len(control.model_error(0, 3).encode()) <= ERROR_BYTES
    assert control.model_state(1, 3) == ModelState.AVAILABLE


def test_attach_rejects_a_foreign_segment() -> None:
    import posix_ipc

    name = f"/sie.ctltest{uuid.uuid4().hex[:8]}.{os.getpid()}.bad"
    posix_ipc.SharedMemory(name, posix_ipc.O_CREX, size=4096).close_fd()
    try:
        with pytest.raises(RuntimeError, match="magic"):
            ControlBlock.attach(name)
    finally:
        posix_ipc.unlink_shared_memory(name)


def test_readiness_flags_and_model_usage(control: ControlBlock) -> None:
    reader = ControlBlock.attach(control.name)
    assert not (reader.is_started or reader.is_leaving or reader.is_draining)
    control.set_started()
    control.set_leaving()
    assert reader.is_started and reader.is_leaving and not reader.is_draining
    control.set_model_memory(1, 2, 5 << 20)
    control.touch_model(1, 2)
    control.set_queue_depths(1, np.array([0, 0, 9, 1], np.uint32))
    usage = reader.model_usage(1, 2)
    assert (usage.memory_bytes, usage.queue_depth) == (5 << 20, 9)
    assert 0 < usage.last_used_ns <= time.monotonic_ns()
    assert reader.model_usage(0, 2) == ModelUsage(0, 0, 0)  # one device's record is its own
    assert reader.model_usage(1, 3).queue_depth == 1
    reader.close()


def test_records_keep_their_size_and_alignment() -> None:
    # A changed record must come with a new MAGIC (see control.py); these pin the current one.
    assert (HEADER.itemsize, DEVICE.itemsize, MODEL.itemsize) == (64, 64, 1040)
    for field in ("memory_bytes", "last_used_ns", "state_ns"):
        assert MODEL.fields[field][1] % 8 == 0, field
    for field in ("heartbeat_ns", "memory_used_bytes", "memory_capacity_bytes"):
        assert DEVICE.fields[field][1] % 8 == 0, field


def test_attach_rejects_a_block_of_another_version(control: ControlBlock) -> None:
    control.header["magic"] = MAGIC - 1  # what the previous layout of this block wrote
    with pytest.raises(RuntimeError, match="magic"):
        ControlBlock.attach(control.name)
    control.header["magic"] = MAGIC


def test_state_changes_are_stamped_and_a_load_clears_the_error_and_counts(control: ControlBlock) -> None:
    before = time.monotonic_ns()
    control.set_model_state(0, 1, ModelState.FAILED, "OSError: broken")
    failed_ns = control.model_state_ns(0, 1)
    assert before <= failed_ns <= time.monotonic_ns()
    assert control.model_error(0, 1) == "OSError: broken"
    control.set_model_state(0, 1, ModelState.LOADING)
    assert control.model_error(0, 1) == "OSError: broken"  # still the last error while retrying
    control.set_model_state(0, 1, ModelState.LOADED)
    control.set_model_state(0, 1, ModelState.UNLOADING)
    control.set_model_state(0, 1, ModelState.AVAILABLE)
    control.set_model_state(0, 1, ModelState.LOADED)
    assert control.model_error(0, 1) == ""
    assert control.model_state_ns(0, 1) >= failed_ns
    assert control.model_usage(0, 1).loads == 2
    assert control.model_usage(1, 1).loads == 0


def test_device_memory_is_per_device(control: ControlBlock) -> None:
    reader = ControlBlock.attach(control.name)
    assert reader.device_memory(1) == (0, 0)
    control.set_device_memory(1, 3 << 30, 16 << 30)
    assert reader.device_memory(1) == (3 << 30, 16 << 30) and reader.device_memory(0) == (0, 0)
    reader.close()
