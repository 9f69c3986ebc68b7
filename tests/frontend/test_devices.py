"""`DeviceClient`'s readiness and placements, read from a real control block (no device process)."""

from __future__ import annotations

import numpy as np
import pytest

from sie.frontend.devices import DeviceClient
from sie.shm.control import ControlBlock, DeviceState, ModelState

PRELOAD = [0]


def serving(control: ControlBlock) -> None:
    """Both devices up with the preloaded model, and the supervisor has said READY once."""
    for device in (0, 1):
        control.set_device_state(device, DeviceState.UP)
        control.set_model_state(device, 0, ModelState.LOADED)
    control.set_started()


def test_not_ready_until_started(control: ControlBlock, client: DeviceClient) -> None:
    for device in (0, 1):
        control.set_device_state(device, DeviceState.UP)
        control.set_model_state(device, 0, ModelState.LOADED)
    assert not client.is_ready(PRELOAD)  # preload done, but the supervisor has not said READY yet
    control.set_started()
    assert client.is_ready(PRELOAD)


def test_ready_while_some_device_can_serve(control: ControlBlock, client: DeviceClient) -> None:
    serving(control)
    control.set_device_state(1, DeviceState.DOWN)  # restarting: degraded, still ready
    assert client.is_ready(PRELOAD)
    control.set_model_state(0, 0, ModelState.LOADING)  # the one left cannot serve the preload
    assert not client.is_ready(PRELOAD)
    control.set_model_state(0, 0, ModelState.LOADED)
    control.set_device_state(0, DeviceState.STARTING)  # no device up at all
    assert not client.is_ready(PRELOAD)


def test_overload_never_makes_it_unready(control: ControlBlock, client: DeviceClient) -> None:
    serving(control)
    control.set_queue_depths(0, np.array([10_000, 0, 0], np.uint32))
    control.set_queue_depths(1, np.array([10_000, 0, 0], np.uint32))
    assert client.is_ready(PRELOAD)


@pytest.mark.parametrize("flag", ["leaving", "draining"])
def test_leaving_or_draining_is_unready(control: ControlBlock, client: DeviceClient, flag: str) -> None:
    serving(control)
    (control.set_leaving if flag == "leaving" else control.set_draining)()
    assert not client.is_ready(PRELOAD)
    assert client.is_draining() == (flag == "draining")  # leaving still serves requests


def test_placements_list_up_devices_that_hold_the_model(control: ControlBlock, client: DeviceClient) -> None:
    serving(control)
    control.set_model_state(1, 2, ModelState.LOADING)
    control.set_model_memory(0, 0, 4096)
    control.touch_model(0, 0)
    control.set_queue_depths(0, np.array([5, 0, 0], np.uint32))
    (first, second) = client.placements(0)
    assert (first.device, first.state, first.usage.memory_bytes, first.usage.queue_depth) == (
        "cuda:0",
        ModelState.LOADED,
        4096,
        5,
    )
    assert first.usage.last_used_ns > 0 and second.device == "cuda:1"
    assert [p.device for p in client.placements(2)] == ["cuda:1"]
    assert client.placements(1) == []
    control.set_device_state(1, DeviceState.DOWN)  # a dead device's stale states are not shown
    assert client.placements(2) == []
