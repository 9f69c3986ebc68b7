"""A frontend refuses 503 QUEUE_FULL before tokenizing when every device holding the model has
published a queue too deep for the request (`sie.frontend.pipeline.check_room`): the app over a
real `DeviceClient` and a real control block in shared memory, the depths written as a device
writes them, and no device process, so a request that got past the check would reach for rings
that do not exist."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from starlette.testclient import TestClient

from sie.frontend.app import build_app
from sie.frontend.devices import DeviceClient
from sie.frontend.state import FrontendState
from sie.settings import Settings
from sie.shm.control import ControlBlock, DeviceState, ModelState
from tests.frontend.test_app import MINILM, catalog

CAP = 16  # --max-concurrent-requests
ITEMS = 3


@pytest.fixture
def app(client: DeviceClient) -> Iterator[TestClient]:
    """The app over the shared fixtures' control block (tests/frontend/conftest.py)."""
    state = FrontendState(settings=Settings(max_concurrent_requests=CAP), catalog=catalog(), devices=client)
    with TestClient(build_app(state), raise_server_exceptions=False) as test_client:
        yield test_client


def publish(control: ControlBlock, depths: dict[int, int], states: dict[int, ModelState]) -> None:
    """Each device up, the model in `states[d]`, and `depths[d]` of its items queued."""
    slot = catalog().slot(MINILM)
    control.set_started()
    for device, state in states.items():
        control.set_device_state(device, DeviceState.UP)
        control.set_model_state(device, slot, state)
        row = np.zeros(len(catalog()), np.uint32)
        row[slot] = depths.get(device, 0)
        control.set_queue_depths(device, row)


def encode(app: TestClient) -> tuple[int, dict[str, object], str | None]:
    body = {"items": [{"text": f"text number {i}"} for i in range(ITEMS)]}
    response = app.post(f"/v1/encode/{MINILM}", json=body, headers={"accept": "application/json"})
    return response.status_code, response.json(), response.headers.get("retry-after")


def test_full_queues_everywhere_are_refused_before_any_device_work(
    app: TestClient, control: ControlBlock, client: DeviceClient
) -> None:
    loaded = {0: ModelState.LOADED, 1: ModelState.LOADED}
    publish(control, {0: CAP - ITEMS + 1, 1: CAP}, loaded)
    status, body, retry_after = encode(app)
    assert (status, body["detail"]["code"], retry_after) == (503, "QUEUE_FULL", "1"), body  # type: ignore[index]
    assert not client.pending and not client.links  # nothing was sent toward a device


@pytest.mark.parametrize(
    ("depths", "states"),
    [
        ({0: CAP - ITEMS, 1: CAP}, {0: ModelState.LOADED, 1: ModelState.LOADED}),  # fits exactly on one
        ({0: CAP, 1: 0}, {0: ModelState.LOADED, 1: ModelState.LOADED}),  # the other has room
    ],
)
def test_a_request_some_device_has_room_for_goes_on(
    app: TestClient, control: ControlBlock, depths: dict[int, int], states: dict[int, ModelState]
) -> None:
    publish(control, depths, states)
    status, body, _ = encode(app)
    # Past the check it reaches for a device's rings, which no device process made here.
    assert (status, body["detail"]["code"]) == (503, "DEVICE_UNAVAILABLE"), body  # type: ignore[index]


def test_a_device_still_loading_the_model_gives_no_room(app: TestClient, control: ControlBlock) -> None:
    publish(control, {0: CAP, 1: 0}, {0: ModelState.LOADED, 1: ModelState.LOADING})
    status, body, _ = encode(app)
    assert (status, body["detail"]["code"]) == (503, "QUEUE_FULL"), body  # type: ignore[index]
