"""/metrics over real shared blocks: one page for the whole server, summed over every frontend's row."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sie.frontend.exposition import ServerCollector, Sources
from sie.frontend.hostinfo import Memory, Nvml
from sie.metrics.recorders import DeviceRecorder, FrontendRecorder, SupervisorRecorder
from sie.shm.control import DeviceState, ModelState
from sie.version import __version__
from tests.metrics.blocks import Blocks, made_blocks

MODELS = ["org/a", "org/b", "org/c"]


class FakeNvml(Nvml):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[int, int, int]] = []

    def gpu_memory(self, domain: int, bus: int, device: int) -> Memory | None:
        self.asked.append((domain, bus, device))
        return Memory(used_bytes=3 << 30, total_bytes=80 << 30)


@pytest.fixture
def blocks() -> Iterator[Blocks]:
    with made_blocks() as made:
        yield made


def scrape(blocks: Blocks, nvml: Nvml | None = None, devices: list[str] | None = None) -> list[Sample]:
    registry = CollectorRegistry(auto_describe=False)
    sources = Sources(blocks.stats, blocks.control, MODELS, devices or ["cpu", "cpu"])
    registry.register(ServerCollector(sources, nvml or FakeNvml()))
    text = generate_latest(registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(samples: list[Sample], metric: str, **labels: str) -> float:
    found = [
        s.value for s in samples if s.name == metric and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (metric, labels, found)
    return found[0]


def test_requests_are_summed_over_frontends(blocks: Blocks) -> None:
    for frontend in (0, 1):
        recorder = FrontendRecorder(blocks.stats, frontend)
        recorder.request(route="encode", model=1, status=200, code=None, stages_s={"total": 0.02})
        recorder.request(route="encode", model=1, status=503, code="QUEUE_FULL", stages_s={"total": 0.001})
        recorder.work(1, items=4, tokens=50)
    FrontendRecorder(blocks.stats, 1).request(
        route="score", model=None, status=404, code="MODEL_NOT_FOUND", stages_s={}
    )
    samples = scrape(blocks)
    assert value(samples, "sie_requests_total", route="encode", model="org/b", status="200") == 2
    assert value(samples, "sie_requests_total", route="encode", model="org/b", status="503") == 2
    assert value(samples, "sie_requests_total", route="score", model="", status="404") == 1
    assert value(samples, "sie_queue_full_total", model="org/b") == 2
    assert value(samples, "sie_errors_total", model="", code="MODEL_NOT_FOUND") == 1
    assert value(samples, "sie_items_total", model="org/b") == 8
    assert value(samples, "sie_tokens_total", model="org/b") == 100
    assert value(samples, "sie_request_stage_seconds_count", stage="total", model="org/b") == 4
    assert value(samples, "sie_request_stage_seconds_bucket", stage="total", model="org/b", le="0.001") == 2
    assert value(samples, "sie_request_stage_seconds_bucket", stage="total", model="org/b", le="0.025") == 4
    assert value(samples, "sie_request_stage_seconds_bucket", stage="total", model="org/b", le="+Inf") == 4
    assert value(samples, "sie_request_stage_seconds_sum", stage="total", model="org/b") == pytest.approx(
        0.042
    )
    assert not [s for s in samples if s.name == "sie_requests_total" and s.labels["model"] == "org/c"]


def test_batches_models_and_devices(blocks: Blocks) -> None:
    device = DeviceRecorder(blocks.stats, 1, blocks.control)
    device.batch(model=2, items=5, tokens=60, max_length=20, forward_s=0.05, queue_s=0.0, ok=True)
    device.cancelled(2, 3)
    blocks.control.set_device_state(0, DeviceState.UP)
    blocks.control.set_model_state(1, 2, ModelState.LOADED)
    blocks.control.set_model_memory(1, 2, 1234)
    blocks.control.set_queue_depths(1, np.array([0, 0, 9], np.uint32))
    samples = scrape(blocks)
    assert value(samples, "sie_batch_size_count", device="1", model="org/c") == 1
    assert value(samples, "sie_batch_size_sum", device="1", model="org/c") == 5
    assert value(samples, "sie_batch_size_bucket", device="1", model="org/c", le="4") == 0
    assert value(samples, "sie_batch_size_bucket", device="1", model="org/c", le="8") == 1
    assert value(samples, "sie_batch_tokens_sum", device="1", model="org/c") == 60
    assert value(samples, "sie_batch_padded_tokens_total", device="1", model="org/c") == 100
    assert value(samples, "sie_cancelled_items_total", device="1", model="org/c") == 3
    assert value(samples, "sie_model_state", device="1", model="org/c", state="loaded") == 1
    assert value(samples, "sie_model_state", device="1", model="org/c", state="available") == 0
    assert value(samples, "sie_model_state", device="0", model="org/a", state="available") == 1
    assert value(samples, "sie_pending_items", device="1", model="org/c") == 9
    assert value(samples, "sie_model_memory_bytes", device="1", model="org/c") == 1234
    assert value(samples, "sie_device_up", device="0", name="cpu") == 1
    assert value(samples, "sie_device_up", device="1", name="cpu") == 0
    assert value(samples, "sie_device_memory_total_bytes", device="0", name="cpu") > 0


def test_gpu_memory_comes_from_nvml_at_the_published_pci_address(blocks: Blocks) -> None:
    DeviceRecorder(blocks.stats, 1, blocks.control).set_pci(0, 0x3B, 0)
    nvml = FakeNvml()
    samples = scrape(blocks, nvml, devices=["cpu", "cuda:0"])
    assert nvml.asked == [(0, 0x3B, 0)]
    assert value(samples, "sie_device_memory_used_bytes", device="1", name="cuda:0") == 3 << 30
    assert value(samples, "sie_device_memory_total_bytes", device="1", name="cuda:0") == 80 << 30


def test_processes_restarts_and_rings(blocks: Blocks) -> None:
    writer = SupervisorRecorder(blocks.stats)
    writer.processes(os.getpid(), [os.getpid(), 0], [0, 0], [2, 0], [0, 1])
    writer.ring(0, 1, 0, used_bytes=640, pending=3)
    DeviceRecorder(blocks.stats, 0, blocks.control).overflow(1, 4)
    samples = scrape(blocks)
    assert value(samples, "sie_process_resident_memory_bytes", role="supervisor", index="0") > 1 << 20
    assert value(samples, "sie_process_cpu_seconds_total", role="device", index="0") > 0
    assert not [
        s for s in samples if s.name == "sie_process_resident_memory_bytes" and s.labels["role"] == "frontend"
    ]
    assert value(samples, "sie_device_restarts_total", device="0", name="cpu") == 2
    assert value(samples, "sie_frontend_restarts_total", frontend="1") == 1
    assert value(samples, "sie_ring_used_bytes", device="0", frontend="1", direction="request") == 640
    assert value(samples, "sie_ring_pending_messages", device="0", frontend="1", direction="request") == 3
    assert value(samples, "sie_result_overflow_messages", device="0", frontend="1") == 4
    assert value(samples, "sie_build_info", version=__version__) == 1


def test_openmetrics_page_parses_with_the_same_values(blocks: Blocks) -> None:
    recorder = FrontendRecorder(blocks.stats, 0)
    recorder.request(route="encode", model=0, status=200, code=None, stages_s={"total": 0.02, "queue": 1e-5})
    recorder.request(route="score", model=None, status=404, code="MODEL_NOT_FOUND", stages_s={})
    DeviceRecorder(blocks.stats, 0, blocks.control).batch(
        model=0, items=3, tokens=40, max_length=20, forward_s=0.125, queue_s=0.0, ok=True
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        ServerCollector(Sources(blocks.stats, blocks.control, MODELS, ["cpu", "cpu"]), FakeNvml())
    )
    parsed = list(openmetrics_families(openmetrics_latest(registry).decode()))  # raises if malformed
    samples = [s for family in parsed for s in family.samples]
    assert value(samples, "sie_requests_total", route="encode", model="org/a", status="200") == 1
    assert value(samples, "sie_errors_total", model="", code="MODEL_NOT_FOUND") == 1
    assert value(samples, "sie_request_stage_seconds_bucket", stage="total", model="org/a", le="0.025") == 1
    assert value(samples, "sie_batch_size_sum", device="0", model="org/a") == 3
    types = {family.name: family.type for family in parsed}
    assert types["sie_requests"] == "counter" and types["sie_request_stage_seconds"] == "histogram"
