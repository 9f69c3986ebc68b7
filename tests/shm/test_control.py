from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from sie.shm.control import ControlBlock, DeviceState, ModelState


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
    control.set_model_state(0, 3, ModelState.FAILED, "OSError: " + "x" * 1000)
    assert control.model_state(0, 3) == ModelState.FAILED
    assert control.model_error(0, 3).startswith("OSError: xxx")
    assert len(control.model_error(0, 3).encode()) <= 240
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
