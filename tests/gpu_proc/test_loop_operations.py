"""The device loop's operational limits over real rings: bounded result overflow, cancelled requests
never computed, every batch counted."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from sie.gpu_proc.batcher import Batch, Batcher, GroupKey, PendingItem
from sie.gpu_proc.inference import Finished
from sie.gpu_proc.loop import MAX_OVERFLOW_MESSAGES, DeviceLoop, RingPair
from sie.metrics.recorders import DeviceRecorder
from sie.shm.layout import Op, ResultKind, Status, TokenBatch, encode_request, mask_of
from sie.shm.ring import Ring
from tests.metrics.blocks import Blocks, made_blocks


class Rig:
    def __init__(self, blocks: Blocks) -> None:
        stem = f"/sietest.{os.getpid()}.{uuid.uuid4().hex[:12]}"
        self.requests = Ring.create(stem + ".req", slots=8, arena_bytes=1 << 16)
        self.results = Ring.create(stem + ".resp", slots=8, arena_bytes=1 << 16)
        self.blocks = blocks
        self.submitted: list[Batch] = []
        adapter = SimpleNamespace(kinds=frozenset({ResultKind.DENSE}))
        registry: Any = SimpleNamespace(get=lambda slot: adapter, touch=lambda slot: None, catalog=[None])
        inference: Any = SimpleNamespace(in_flight=0, depth=1, submit=self.submitted.append)
        self.loop = DeviceLoop(
            device_index=0,
            namespace=None,  # type: ignore[arg-type]
            control=blocks.control,
            doorbell=None,  # type: ignore[arg-type]
            eventfds=[],
            registry=registry,
            batcher=Batcher(max_batch_wait_s=0.0),
            inference=inference,
            supervisor_pid=0,
            stats=DeviceRecorder(blocks.stats, 0, blocks.control),
        )
        wake: Any = SimpleNamespace(ring=lambda: None)
        self.pair = RingPair(0, 1, self.requests, self.results, wake)
        self.loop.pairs[0] = self.pair

    def push(self, req_id: int, op: Op = Op.ENCODE, n_items: int = 2) -> None:
        message = TokenBatch(
            req_id=req_id,
            op=op,
            model_slot=0,
            offsets=np.arange(n_items + 1, dtype=np.int32) * 3,
            input_ids=np.full(n_items * 3, 5, np.int32),
            output_mask=mask_of({ResultKind.DENSE}),
        )
        assert self.requests.try_push(encode_request(message), req_id)

    def close(self) -> None:
        for ring in (self.requests, self.results):
            ring.close()
            ring.unlink()


@pytest.fixture
def rig() -> Iterator[Rig]:
    with made_blocks(n_devices=1, n_frontends=1, n_models=1) as blocks:
        made = Rig(blocks)
        yield made
        made.close()


def test_a_frontend_that_reads_no_results_gets_no_new_work(rig: Rig) -> None:
    rig.pair.overflow.extend(np.zeros(64, np.uint8) for _ in range(MAX_OVERFLOW_MESSAGES))
    rig.push(1)
    rig.loop._drain_requests()
    assert rig.requests.pending() == 1 and len(rig.loop.batcher) == 0  # left in its ring
    rig.loop._observe()
    assert rig.blocks.stats.v["overflow"][0, 0] == MAX_OVERFLOW_MESSAGES
    rig.pair.overflow.popleft()
    rig.loop._drain_requests()
    assert rig.requests.pending() == 0 and len(rig.loop.batcher) == 2


def test_a_cancelled_request_never_reaches_inference(rig: Rig) -> None:
    rig.push(1)
    rig.push(2)
    rig.push(1, op=Op.CANCEL, n_items=0)
    rig.loop._drain_requests()
    rig.loop._dispatch()
    (batch,) = rig.submitted
    assert [item.req_id for item in batch.items] == [2, 2]
    assert rig.blocks.stats.v["cancelled_items"][0, 0] == 2


def test_every_finished_batch_is_counted(rig: Rig) -> None:
    items = [PendingItem(0, 9, i, np.ones(n, np.int32), None, 0.0, 1_000) for i, n in enumerate((2, 4))]
    batch = Batch(GroupKey(0, int(Op.ENCODE), 1, 0, 0), items, 6, 4, 0.0)
    rig.loop._publish([Finished(batch, None, Status.INFERENCE_ERROR, "boom", 5_000, 2_005_000)])
    v = rig.blocks.stats.v
    assert (v["batch_items"][0, 0], v["batch_tokens"][0, 0], v["padded_tokens"][0, 0]) == (2, 6, 8)
    assert v["failed_batches"][0, 0] == 1
    assert v["forward_s"][0, 0] == pytest.approx(0.002)
