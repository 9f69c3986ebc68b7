"""The frontend's result watcher: one unreadable message fails its own request and nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np

from sie.errors import DeviceUnavailable, InferenceError
from sie.frontend.devices import DeviceClient
from sie.shm.control import ControlBlock, DeviceState, ModelState
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.layout import Op, ResultKind, TokenBatch, encode_result
from sie.shm.layout import ResultBlock as Block
from sie.shm.names import Namespace
from sie.shm.ring import Ring


def one_item(slot: int = 0) -> TokenBatch:
    return TokenBatch(
        req_id=0,
        op=Op.ENCODE,
        model_slot=slot,
        offsets=np.array([0, 2], np.int32),
        input_ids=np.ones(2, np.int32),
    )


def dense_result(req_id: int) -> np.ndarray:
    values = np.full((1, 4), 0.5, np.float32)
    block = Block(req_id, ResultKind.DENSE, np.zeros(1, np.int32), np.zeros(1, np.uint8), values, dim=4)
    return encode_result(block)


@contextlib.contextmanager
def one_device(**options: Any) -> Iterator[tuple[DeviceClient, Ring]]:
    """A client wired to one up device with the model loaded: real control block, rings,
    doorbell and eventfd, and no device process (the test writes the response ring itself)."""
    namespace = Namespace("watch" + uuid.uuid4().hex[:8], os.getpid())
    control = ControlBlock.create(namespace.control(), n_devices=1, n_frontends=1, n_models=1)
    control.set_device_state(0, DeviceState.UP)
    control.set_model_state(0, 0, ModelState.LOADED)
    made = [
        Ring.create(namespace.ring(0, 0, 0, "req"), slots=8, arena_bytes=1 << 16),
        Ring.create(namespace.ring(0, 0, 0, "resp"), slots=8, arena_bytes=1 << 16),
    ]
    bell = Doorbell.create(namespace.doorbell(0, 0))
    wake = EventFd.create()
    try:
        yield DeviceClient(namespace, control, 0, wake, **options), made[1]
    finally:
        for ring in made:
            ring.close()
            ring.unlink()
        bell.close()
        bell.unlink()
        wake.close()
        control.close()
        control.unlink()


def test_a_bad_message_fails_its_request_and_the_next_one_is_answered() -> None:
    async def scenario(client: DeviceClient, responses: Ring) -> tuple[BaseException | None, object]:
        first = asyncio.ensure_future(client.submit(one_item()))
        second = asyncio.ensure_future(client.submit(one_item()))
        await asyncio.sleep(0)  # both submitted: ids assigned, pending
        bad_id, good_id = sorted(client.pending)
        assert responses.try_push(np.full(80, 0xFF, np.uint8), bad_id)  # garbage under a real id
        assert responses.try_push(dense_result(good_id), good_id)
        client._on_wake()
        results = await asyncio.wait_for(asyncio.gather(first, second, return_exceptions=True), 5)
        return results[0] if isinstance(results[0], BaseException) else None, results[1]

    with one_device() as (client, responses):
        error, good = asyncio.run(scenario(client, responses))
    assert isinstance(error, InferenceError)
    assert not isinstance(good, BaseException)
    assert good.rows[ResultKind.DENSE].tolist() == [[0.5] * 4]  # type: ignore[attr-defined]


def test_a_device_that_never_answers_times_the_request_out_and_forgets_it() -> None:
    async def scenario(client: DeviceClient) -> BaseException | None:
        try:
            await asyncio.wait_for(client.submit(one_item()), 5)
        except DeviceUnavailable as exc:
            return exc
        return None

    with one_device(request_timeout_s=0.05) as (client, _):
        error = asyncio.run(scenario(client))
        assert isinstance(error, DeviceUnavailable) and "did not answer in time" in str(error)
        assert not client.pending and not client.links[0].pending
