"""Every response counted once (route, model, status, code, stage times), headers, and tracing spans."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import numpy as np
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient

from sie.frontend.app import build_app
from sie.frontend.operations import Operations
from sie.frontend.state import FrontendState
from sie.frontend.tracing import TraceIdFilter, Tracer, install_log_correlation
from sie.logs import JsonFormatter
from sie.metrics.labels import CODES, ROUTES, STAGE, STATUSES
from sie.metrics.recorders import FrontendRecorder
from sie.settings import Settings
from sie.version import SIE_PROTOCOL_VERSION, __version__
from tests.frontend.test_app import MINILM, FakeDevices, catalog
from tests.metrics.blocks import Blocks, made_blocks

BODY = {"items": [{"text": "hello there"}, {"text": "general kenobi"}]}


@pytest.fixture
def blocks() -> Iterator[Blocks]:
    with made_blocks(n_devices=1, n_frontends=2, n_models=2) as made:
        yield made


def make_client(blocks: Blocks, devices: FakeDevices, tracer: Tracer | None = None) -> TestClient:
    cat = devices.catalog
    state = FrontendState(
        settings=Settings(),
        catalog=cat,
        devices=devices,
        preload_slots=[cat.slot(MINILM)],
        ops=Operations(recorder=FrontendRecorder(blocks.stats, 1), tracer=tracer),
    )
    return TestClient(build_app(state), raise_server_exceptions=False)


def requests_of(blocks: Blocks, route: str, model: int, status: int) -> int:
    return int(blocks.stats.v["requests"][1, ROUTES.index(route), model, STATUSES.index(status)])


def test_requests_are_counted_with_model_status_code_and_stages(blocks: Blocks) -> None:
    devices = FakeDevices(catalog())
    slot = devices.catalog.slot(MINILM)
    none = blocks.stats.none_slot
    with make_client(blocks, devices) as client:
        ok = client.post(f"/v1/encode/{MINILM}", json=BODY, headers={"accept": "application/json"})
        assert ok.status_code == 200
        assert client.post("/v1/encode/no/such-model", json=BODY).status_code == 404
        devices.encode_error = RuntimeError("boom")  # type: ignore[assignment]
        assert client.post(f"/v1/encode/{MINILM}", json=BODY).status_code == 500
        assert client.get("/readyz").status_code == 200
    v = blocks.stats.v
    assert requests_of(blocks, "encode", slot, 200) == 1
    assert requests_of(blocks, "encode", none, 404) == 1
    assert requests_of(blocks, "encode", slot, 500) == 1
    assert requests_of(blocks, "health", none, 200) == 1
    assert v["errors"][1, none, CODES.index("MODEL_NOT_FOUND")] == 1
    assert v["errors"][1, slot, CODES.index("INTERNAL_ERROR")] == 1
    assert v["items"][1, slot] == 2 and v["tokens"][1, slot] > 2
    for stage in ("queue", "tokenization", "inference", "postprocessing"):
        assert v["stage_buckets"][1, STAGE[stage], slot].sum() == 1, stage  # the successful request only
    assert v["stage_buckets"][1, STAGE["total"], slot].sum() == 2
    assert v["stage_sum_s"][1, STAGE["inference"], slot] == pytest.approx(0.0015)  # FakeDevices' 1.5 ms
    assert not np.any(v["requests"][0])


def test_headers_split_protocol_and_own_version(blocks: Blocks) -> None:
    with make_client(blocks, FakeDevices(catalog())) as client:
        ok = client.post(f"/v1/encode/{MINILM}", json=BODY)
        assert ok.headers["x-sie-server-version"] == SIE_PROTOCOL_VERSION == "0.10.1"
        assert ok.headers["server"] == f"sie/{__version__}"
        missing = client.post("/v1/encode/nope", json=BODY)
        assert missing.headers["server"] == f"sie/{__version__}"  # errors too
        assert client.get("/version").json() == {"version": __version__, "sie_protocol_version": "0.10.1"}
        assert client.get("/openapi.json").json()["info"]["version"] == __version__


@pytest.fixture
def spans() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Tracer(provider), exporter
    provider.shutdown()


def test_one_span_per_request_with_a_child_per_stage(
    blocks: Blocks, spans: tuple[Tracer, InMemorySpanExporter]
) -> None:
    tracer, exporter = spans
    with make_client(blocks, FakeDevices(catalog()), tracer) as client:
        assert client.post(f"/v1/encode/{MINILM}", json=BODY).status_code == 200
        assert client.get("/healthz").status_code == 200
    finished = exporter.get_finished_spans()
    roots = [s for s in finished if s.parent is None]
    assert [r.name for r in roots] == ["POST encode", "GET health"]
    root = roots[0]
    assert root.attributes is not None
    assert root.attributes["sie.model"] == MINILM
    assert root.attributes["http.response.status_code"] == 200
    assert root.attributes["sie.items"] == 2
    children = {
        s.name: s for s in finished if s.parent is not None and s.parent.span_id == root.context.span_id
    }
    assert set(children) == {"tokenization", "queue", "inference", "postprocessing"}
    assert root.start_time is not None and root.end_time is not None
    for child in children.values():
        assert child.context.trace_id == root.context.trace_id
        assert child.start_time is not None and child.end_time is not None
        assert root.start_time <= child.start_time <= child.end_time <= root.end_time
    inference = children["inference"]
    assert inference.end_time is not None and inference.start_time is not None
    assert inference.end_time - inference.start_time == pytest.approx(1.5e6, abs=1e3)  # FakeDevices: 1.5 ms
    assert not [s for s in finished if s.parent is not None and s.parent.span_id == roots[1].context.span_id]


def test_log_lines_during_a_request_carry_its_trace_id(
    blocks: Blocks, spans: tuple[Tracer, InMemorySpanExporter]
) -> None:
    tracer, exporter = spans
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter("frontend0"))
    root_logger = logging.getLogger()
    root_logger.addHandler(handler)
    try:
        install_log_correlation()
        devices = FakeDevices(catalog())
        devices.encode_error = RuntimeError("boom")  # type: ignore[assignment]
        with make_client(blocks, devices, tracer) as client:
            assert client.post(f"/v1/encode/{MINILM}", json=BODY).status_code == 500
        logging.getLogger("sie.test").warning("outside any request")
    finally:
        root_logger.removeHandler(handler)
        for other in root_logger.handlers:
            other.filters = [f for f in other.filters if not isinstance(f, TraceIdFilter)]
    lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
    (span,) = [s for s in exporter.get_finished_spans() if s.parent is None]
    (failure,) = [line for line in lines if line["message"] == "unexpected error"]
    assert failure["trace_id"] == format(span.context.trace_id, "032x")
    assert failure["span_id"] == format(span.context.span_id, "016x")
    (outside,) = [line for line in lines if line["message"] == "outside any request"]
    assert "trace_id" not in outside
