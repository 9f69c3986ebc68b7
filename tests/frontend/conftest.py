"""Fixtures the frontend tests share: a real control block in shared memory for two devices and
three model slots, and a `DeviceClient` reading it, with no device process behind them."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from sie.frontend.devices import DeviceClient
from sie.shm.control import ControlBlock
from sie.shm.doorbell import EventFd
from sie.shm.names import Namespace


@pytest.fixture
def control() -> Iterator[ControlBlock]:
    namespace = Namespace("devtest" + uuid.uuid4().hex[:8], os.getpid())
    block = ControlBlock.create(namespace.control(), n_devices=2, n_frontends=1, n_models=3)
    yield block
    block.close()
    block.unlink()


@pytest.fixture
def client(control: ControlBlock) -> Iterator[DeviceClient]:
    wake = EventFd.create()
    namespace = Namespace(control.name.split(".")[1], os.getpid())
    yield DeviceClient(namespace, control, 0, wake, device_names=["cuda:0", "cuda:1"])
    wake.close()
