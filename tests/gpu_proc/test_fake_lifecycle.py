"""The device loop with SIE's fake model, a real registry, inference thread and rings: a batch whose
forward runs out of memory, and requests queued for a model that is then unloaded."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from sie.catalog import Catalog
from sie.frontend.code_points import CodePointTokenizer
from sie.gpu_proc.adapters.base import load_adapter
from sie.gpu_proc.batcher import Batcher
from sie.gpu_proc.inference import InferenceThread
from sie.gpu_proc.loop import DeviceLoop, RingPair
from sie.gpu_proc.registry import Registry, weight_file_bytes
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.control import ModelState
from sie.shm.layout import (
    Op,
    ResultBlock,
    ResultKind,
    Status,
    TokenBatch,
    decode_result,
    encode_request,
    mask_of,
)
from sie.shm.ring import Ring
from tests.metrics.blocks import made_blocks
from tests.tiny_models.fake import model_yaml_fake

from .lifecycle_fakes import wait_state

TOO_LONG = 20  # tokens: a forward over this many fails to allocate


class Rig:
    def __init__(self, control: Any, batch_wait_s: float) -> None:
        stem = f"/sietest.{os.getpid()}.{uuid.uuid4().hex[:12]}"
        self.requests = Ring.create(stem + ".req", slots=64, arena_bytes=1 << 16)
        self.results = Ring.create(stem + ".resp", slots=64, arena_bytes=1 << 18)
        config = parse_model_config(model_yaml_fake("tiny/fake", faults={"oom_over_tokens": TOO_LONG}))
        self.control = control
        self.registry = Registry(Catalog([config]), control, 0, "cpu", loader=load_adapter)
        wake = lambda: None  # noqa: E731  # the test turns the loop by hand
        inference = InferenceThread(Runner(torch.device("cpu")), self.registry, wake=wake)
        self.loop = DeviceLoop(
            device_index=0,
            namespace=None,  # type: ignore[arg-type]
            control=control,
            doorbell=None,  # type: ignore[arg-type]
            eventfds=[],
            registry=self.registry,
            batcher=Batcher(max_batch_wait_s=batch_wait_s),
            inference=inference,
            supervisor_pid=0,
        )
        self.loop.pairs[0] = RingPair(0, 1, self.requests, self.results, SimpleNamespace(ring=wake))  # type: ignore[arg-type]
        self.registry.request_load(0)
        wait_state(control, 0, ModelState.LOADED)

    def push(self, req_id: int, texts: list[str]) -> None:
        encoded = CodePointTokenizer(64).encode(texts)
        mask = mask_of({ResultKind.DENSE})
        message = TokenBatch(req_id, Op.ENCODE, 0, encoded.offsets, encoded.input_ids, output_mask=mask)
        assert self.requests.try_push(encode_request(message), req_id)

    def answers(self) -> dict[int, list[ResultBlock]]:
        got: dict[int, list[ResultBlock]] = {}
        while (message := self.results.try_pop()) is not None:
            block = decode_result(message.view.copy())
            self.results.release(message)
            got.setdefault(block.req_id, []).append(block)
        return got

    def run_batches(self, timeout_s: float = 10.0) -> None:
        """Turn the loop until nothing is queued or running."""
        deadline = time.monotonic() + timeout_s
        while len(self.loop.batcher) or self.loop.inference.in_flight:
            assert time.monotonic() < deadline, "batches never finished"
            self.loop._dispatch()
            self.loop._publish(self.loop.inference.take_finished())
            time.sleep(0.001)

    def close(self) -> None:
        self.loop.inference.stop()
        self.registry.close()
        for ring in (self.requests, self.results):
            ring.close()
            ring.unlink()


@pytest.fixture
def rig() -> Iterator[Rig]:
    with made_blocks(n_devices=1, n_frontends=1, n_models=1) as blocks:
        made = Rig(blocks.control, batch_wait_s=0.0)
        yield made
        made.close()


def test_only_the_request_that_never_fits_is_refused_and_the_rest_answered(rig: Rig) -> None:
    requests = {1: ["a few words", "more words"], 2: ["y" * (TOO_LONG + 1)], 3: ["x"]}
    for req_id, texts in requests.items():  # 2 is alone over the limit: no split makes it fit
        rig.push(req_id, texts)
    rig.loop._drain_requests()
    rig.run_batches()
    got = rig.answers()
    assert [b.status for b in got[2]] == [Status.OUT_OF_MEMORY]  # -> 503 RESOURCE_EXHAUSTED
    assert "can't allocate memory" in got[2][0].message
    for req_id in (1, 3):
        (block,) = got[req_id]
        assert (
            block.status == Status.OK and sorted(block.item_index.tolist()) == [0, 1][: len(requests[req_id])]
        )
        assert block.batch_items < 4  # answered from a piece of the batch that failed whole
        rig.push(10 + req_id, requests[req_id])  # the same items again, in batches that fit
    rig.loop._drain_requests()
    rig.run_batches()
    again = rig.answers()
    for req_id in (1, 3):
        first, second = got[req_id][0], again[10 + req_id][0]
        np.testing.assert_array_equal(
            first.values[np.argsort(first.item_index)], second.values[np.argsort(second.item_index)]
        )


def test_requests_queued_for_a_model_that_is_unloaded_are_answered_once_each() -> None:
    with made_blocks(n_devices=1, n_frontends=1, n_models=1) as blocks:
        rig = Rig(blocks.control, batch_wait_s=60.0)  # nothing runs: everything stays queued
        try:
            for req_id in (1, 2, 3):
                rig.push(req_id, ["queued", "items"])
            rig.loop._drain_requests()
            rig.loop._dispatch()
            assert len(rig.loop.batcher) == 6 and rig.loop.inference.in_flight == 0
            assert rig.registry.try_unload(0)
            rig.loop._tend_models(time.monotonic())
            got = rig.answers()
            assert sorted(got) == [1, 2, 3] and len(rig.loop.batcher) == 0
            assert all([b.status for b in blocks_] == [Status.MODEL_NOT_LOADED] for blocks_ in got.values())
            wait_state(blocks.control, 0, ModelState.AVAILABLE)
            rig.push(4, ["after"])  # the next request starts the load again and is told to retry
            rig.loop._drain_requests()
            assert [b.status for b in rig.answers()[4]] == [Status.MODEL_NOT_LOADED]
            wait_state(blocks.control, 0, ModelState.LOADED)
        finally:
            rig.close()


def test_the_memory_manager_expects_a_fakes_declared_footprint() -> None:
    config = parse_model_config(model_yaml_fake("tiny/fake", memory_footprint_bytes=5 << 20))
    assert weight_file_bytes(config) == 5 << 20
