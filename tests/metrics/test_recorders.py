"""Each writer touches only its own rows; model loads are derived from the control block's states."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from sie.metrics.labels import BATCH_SIZE_BUCKETS, CODES, LATENCY_BUCKETS_S, ROUTES, STAGE, STATUSES
from sie.metrics.recorders import DeviceRecorder, FrontendRecorder, SupervisorRecorder
from sie.shm.control import ModelState
from tests.metrics.blocks import Blocks


def test_frontend_counts_into_its_own_row(blocks: Blocks) -> None:
    recorder = FrontendRecorder(blocks.stats, frontend=1)
    recorder.request(route="encode", model=2, status=200, code=None, stages_s={"total": 0.003, "queue": 0.0})
    recorder.request(route="encode", model=None, status=404, code="MODEL_NOT_FOUND", stages_s={})
    recorder.work(2, items=3, tokens=40)
    v = blocks.stats.v
    assert not np.any(v["requests"][0])  # frontend 0's row is untouched
    assert v["requests"][1, ROUTES.index("encode"), 2, STATUSES.index(200)] == 1
    assert v["requests"][1, ROUTES.index("encode"), blocks.stats.none_slot, STATUSES.index(404)] == 1
    assert v["errors"][1, blocks.stats.none_slot, CODES.index("MODEL_NOT_FOUND")] == 1
    assert (v["items"][1, 2], v["tokens"][1, 2]) == (3, 40)
    total = v["stage_buckets"][1, STAGE["total"], 2]
    assert total.sum() == 1 and total[LATENCY_BUCKETS_S.index(0.005)] == 1
    assert v["stage_sum_s"][1, STAGE["total"], 2] == pytest.approx(0.003)


def test_device_batches_and_instrumentation_lines(blocks: Blocks, caplog: pytest.LogCaptureFixture) -> None:
    recorder = DeviceRecorder(blocks.stats, 1, blocks.control, instrumentation=True)
    with caplog.at_level(logging.INFO, logger="sie.metrics.recorders"):
        recorder.batch(model=0, items=3, tokens=30, max_length=12, forward_s=0.02, queue_s=0.001, ok=True)
        recorder.batch(model=0, items=64, tokens=640, max_length=10, forward_s=0.1, queue_s=0.0, ok=False)
    v = blocks.stats.v
    assert v["batch_size_buckets"][1, 0, BATCH_SIZE_BUCKETS.index(4)] == 1  # 3 items: le="4"
    assert v["batch_size_buckets"][1, 0, BATCH_SIZE_BUCKETS.index(64)] == 1
    assert (v["batch_items"][1, 0], v["batch_tokens"][1, 0]) == (67, 670)
    assert v["padded_tokens"][1, 0] == 3 * 12 + 64 * 10
    assert v["failed_batches"][1, 0] == 1
    assert v["forward_s"][1, 0] == pytest.approx(0.12)
    assert not np.any(v["batch_items"][0])
    lines = [r for r in caplog.records if r.getMessage() == "batch"]
    assert (
        len(lines) == 2 and lines[0].items == 3 and lines[0].padding == pytest.approx(1 - 30 / 36, abs=1e-3)
    )


def test_no_batch_lines_without_instrumentation(blocks: Blocks, caplog: pytest.LogCaptureFixture) -> None:
    recorder = DeviceRecorder(blocks.stats, 0, blocks.control)
    with caplog.at_level(logging.INFO, logger="sie.metrics.recorders"):
        recorder.batch(model=0, items=1, tokens=3, max_length=3, forward_s=0.01, queue_s=0.0, ok=True)
    assert not [r for r in caplog.records if r.getMessage() == "batch"]


def test_loads_unloads_and_failures_follow_the_control_block(blocks: Blocks) -> None:
    control, v = blocks.control, blocks.stats.v
    recorder = DeviceRecorder(blocks.stats, 1, control)
    control.set_model_state(1, 0, ModelState.LOADING)
    recorder.track_models(now=10.0)
    control.set_model_state(1, 0, ModelState.LOADED)
    recorder.track_models(now=12.5)
    control.set_model_state(1, 1, ModelState.LOADED)  # loaded between two looks: counted, no duration
    control.set_model_state(1, 2, ModelState.LOADING)
    recorder.track_models(now=13.0)
    control.set_model_state(1, 2, ModelState.FAILED, "boom")
    control.set_model_state(1, 0, ModelState.UNLOADING)
    recorder.track_models(now=14.0)
    control.set_model_state(1, 0, ModelState.AVAILABLE)
    recorder.track_models(now=15.0)
    assert v["loads"][1].tolist() == [1, 1, 0, 0]
    assert v["load_s"][1, 0] == pytest.approx(2.5)
    assert v["load_failures"][1].tolist() == [0, 0, 1, 0]
    assert v["unloads"][1].tolist() == [1, 0, 0, 0]
    assert not np.any(v["loads"][0])  # device 0's states never changed


def test_overflow_cancellations_and_pci(blocks: Blocks) -> None:
    recorder = DeviceRecorder(blocks.stats, 0, blocks.control)
    recorder.overflow(1, 17)
    recorder.cancelled(2, 5)
    recorder.set_pci(0, 0x65, 0)
    v = blocks.stats.v
    assert v["overflow"][0].tolist() == [0, 17]
    assert v["cancelled_items"][0, 2] == 5
    assert v["pci"][0].tolist() == [1, 0, 0x65, 0]


def test_supervisor_section(blocks: Blocks) -> None:
    writer = SupervisorRecorder(blocks.stats)
    writer.processes(100, [101, 102], [103, 104], [0, 3], [1, 0])
    writer.ring(1, 0, 1, used_bytes=4096, pending=2)
    writer.ring_capacity(1 << 20, 2 << 20)
    v = blocks.stats.v
    assert int(v["supervisor_pid"][0]) == 100
    assert v["device_pids"].tolist() == [101, 102] and v["frontend_pids"].tolist() == [103, 104]
    assert v["device_restarts"].tolist() == [0, 3] and v["frontend_restarts"].tolist() == [1, 0]
    assert (v["ring_used_bytes"][1, 0, 1], v["ring_pending"][1, 0, 1]) == (4096, 2)
    assert v["ring_capacity_bytes"].tolist() == [1 << 20, 2 << 20]
