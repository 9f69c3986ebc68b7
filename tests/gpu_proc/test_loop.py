"""The device loop's sleep decision, without processes or rings."""

from __future__ import annotations

import os
import time
import uuid
from types import SimpleNamespace
from typing import Any

import numpy as np

from sie.gpu_proc.batcher import Batcher
from sie.gpu_proc.loop import IDLE_WAIT_S, QUEUE_DEPTH_EVERY_S, DeviceLoop
from sie.shm.control import ControlBlock
from sie.shm.layout import Op, TokenBatch
from sie.shm.names import Namespace


def loop_with(batcher: Batcher, in_flight: int = 0, control: Any = None) -> DeviceLoop:
    """A loop without processes or rings over three model slots; its queue depths go to `control`
    (the sleep decision reads only the batcher and the inference count)."""
    unused: Any = None
    return DeviceLoop(
        device_index=0,
        namespace=unused,
        control=control,
        doorbell=unused,
        eventfds=[],
        registry=SimpleNamespace(catalog=[None, None, None]),  # type: ignore[arg-type]
        batcher=batcher,
        inference=SimpleNamespace(in_flight=in_flight, depth=1),  # type: ignore[arg-type]
        supervisor_pid=0,
    )


def overdue_batcher() -> Batcher:
    batcher = Batcher(max_batch_wait_s=0.010)
    request = TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.array([0, 3], np.int32),
        input_ids=np.ones(3, np.int32),
    )
    assert batcher.try_add(request, source=0, now=time.monotonic() - 1.0)  # its wait ran out long ago
    return batcher


def test_full_pipeline_sleeps_until_the_doorbell_instead_of_spinning() -> None:
    # Regression: an overdue group made the loop wait 0 s while a batch ran, spinning this thread
    # and starving the inference thread of the GIL (32 clients: 105 -> 29 items/s).
    assert loop_with(overdue_batcher(), in_flight=1)._wait_s() == IDLE_WAIT_S


def test_idle_device_holds_a_young_group_for_its_wait_then_runs_it() -> None:
    batcher = Batcher(max_batch_wait_s=0.2)
    request = TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.array([0, 3], np.int32),
        input_ids=np.ones(3, np.int32),
    )
    assert batcher.try_add(request, source=0, now=time.monotonic())
    submitted: list[Any] = []
    inference = SimpleNamespace(in_flight=0, depth=1, submit=submitted.append)
    loop = loop_with(batcher, in_flight=0)
    loop.inference = inference  # type: ignore[assignment]
    loop._dispatch()
    assert submitted == [] and 0.1 < loop._wait_s() <= 0.2  # sleeps until the wait runs out
    loop.batcher = overdue_batcher()  # the same item, once its wait has run out
    loop._dispatch()
    assert len(submitted) == 1 and len(submitted[0].items) == 1


def test_zero_wait_runs_at_once() -> None:
    batcher = Batcher(max_batch_wait_s=0.0)
    request = TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.array([0, 3], np.int32),
        input_ids=np.ones(3, np.int32),
    )
    assert batcher.try_add(request, source=0, now=time.monotonic())
    submitted: list[Any] = []
    loop = loop_with(batcher, in_flight=0)
    loop.inference = SimpleNamespace(in_flight=0, depth=1, submit=submitted.append)  # type: ignore[assignment]
    loop._dispatch()
    assert len(submitted) == 1


def test_empty_batcher_sleeps_the_idle_interval() -> None:
    assert loop_with(Batcher(), in_flight=0)._wait_s() == IDLE_WAIT_S


def test_queue_depths_are_published_throttled_and_zeroed_at_once() -> None:
    writes: list[list[int]] = []
    control: Any = SimpleNamespace(set_queue_depths=lambda device, depths: writes.append(depths.tolist()))
    batcher = overdue_batcher()  # one item of model 0
    loop = loop_with(batcher, control=control)
    loop._publish_queue_depths(100.0)
    loop._publish_queue_depths(100.001)  # within the interval: no second write
    assert writes == [[1, 0, 0]]
    loop._publish_queue_depths(100.0 + QUEUE_DEPTH_EVERY_S)
    assert len(writes) == 2
    batcher.drop_source(0)
    loop._publish_queue_depths(100.006)  # emptied: the zeros go out without waiting
    loop._publish_queue_depths(100.5)  # and idle loops write nothing more
    assert writes[2:] == [[0, 0, 0]]


def test_a_queue_that_falls_is_published_at_once() -> None:
    # A batch leaving the queue must show before the interval is up: frontends refuse a model whose
    # published queue is full, and at the cap no new request would come to wake the loop.
    writes: list[list[int]] = []
    control: Any = SimpleNamespace(set_queue_depths=lambda device, depths: writes.append(depths.tolist()))
    batcher = overdue_batcher()  # one item of model 0, from source 0
    other = TokenBatch(req_id=2, op=Op.ENCODE, model_slot=0, offsets=np.array([0, 2], np.int32),
                       input_ids=np.ones(2, np.int32))  # fmt: skip
    assert batcher.try_add(other, source=1, now=time.monotonic())
    loop = loop_with(batcher, control=control)
    loop._publish_queue_depths(100.0)
    batcher.drop_source(0)  # one of the two items leaves
    loop._publish_queue_depths(100.001)  # within the interval, but a fall
    assert writes == [[2, 0, 0], [1, 0, 0]]


def test_a_new_device_clears_the_depths_a_dead_one_left() -> None:
    # Frontends refuse a model whose queue is full on every device: a depth left by a device that
    # died under load would refuse its requests until the restarted device's queue filled again.
    namespace = Namespace("loop" + uuid.uuid4().hex[:8], os.getpid())
    control = ControlBlock.create(namespace.control(), n_devices=1, n_frontends=1, n_models=3)
    try:
        control.set_queue_depths(0, np.array([512, 7, 0], np.uint32))  # the predecessor's last write
        loop_with(Batcher(), control=control)._publish_queue_depths(100.0)
        assert control.models["queue_depth"][0].tolist() == [0, 0, 0]
    finally:
        control.close()
        control.unlink()


def test_the_heap_is_trimmed_at_an_idle_moment_after_work() -> None:
    busy = loop_with(overdue_batcher(), in_flight=0)  # an item queued: work in hand
    busy._tend_heap(100.0)
    assert busy.heap.trims == 0
    busy.batcher.drop_source(0)  # and now nothing is queued or running
    busy._tend_heap(100.1)
    assert busy.heap.trims == 1
    busy._tend_heap(200.0)  # idle again, but no work since: nothing to give back
    assert busy.heap.trims == 1
