"""OpenTelemetry tracing (optional: `pip install 'sie[tracing]'`), on with `SIE_TRACING_ENABLED`.

One span per HTTP request, current while the request runs (so log lines carry its trace id), with
one child span per stage: tokenization, queue, inference, post-processing. Queue and inference
happen in the device process, which reports their durations with the results; their child spans
are placed on the request's timeline from those durations, ending when the results arrived.
Exporting follows the standard `OTEL_*` variables, read by the OpenTelemetry SDK itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import Scope

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from sie.frontend.observe import RequestRecord

INSTALL_HINT = "tracing needs OpenTelemetry: pip install 'sie[tracing]' (opentelemetry-sdk and an exporter)"


@dataclass(slots=True)
class _Open:
    span: Any
    token: object
    started_ns: int  # wall clock at the start, for placing the stage spans
    started_s: float  # perf_counter at the same instant


class Tracer:
    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry import context, trace

        self._context = context
        self._trace = trace
        self.provider = provider
        self._tracer = provider.get_tracer("sie")

    def start(self, scope: Scope, record: RequestRecord) -> _Open:
        method = scope.get("method", "GET")
        span = self._tracer.start_span(
            f"{method} {record.route}",
            kind=self._trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"], "sie.route": record.route},
        )
        token = self._context.attach(self._trace.set_span_in_context(span))
        return _Open(span, token, time.time_ns(), time.perf_counter())

    def finish(self, opened: _Open, record: RequestRecord, total_s: float) -> None:
        self._context.detach(opened.token)
        span = opened.span
        span.set_attribute("http.response.status_code", record.status)
        if record.model_name is not None:
            span.set_attribute("sie.model", record.model_name)
        if record.code is not None:
            span.set_attribute("sie.error_code", record.code)
        if record.items:
            span.set_attributes({"sie.items": record.items, "sie.tokens": record.tokens})
        self._stage_spans(opened, record)
        span.end(opened.started_ns + int(total_s * 1e9))

    def _stage_spans(self, opened: _Open, record: RequestRecord) -> None:
        if record.results_at_s is None:
            return
        parent = self._trace.set_span_in_context(opened.span)

        def at_ns(perf_s: float) -> int:
            return opened.started_ns + int((perf_s - opened.started_s) * 1e9)

        results_ns = at_ns(record.results_at_s)
        inference_ns = int(record.inference_s * 1e9)
        queue_ns = int(record.queue_s * 1e9)
        tokenize_ns = int(record.tokenization_s * 1e9)
        spans = [
            ("tokenization", results_ns - inference_ns - queue_ns - tokenize_ns, tokenize_ns),
            ("queue", results_ns - inference_ns - queue_ns, queue_ns),
            ("inference", results_ns - inference_ns, inference_ns),
        ]
        if record.postprocessing_s is not None:
            spans.append(("postprocessing", results_ns, int(record.postprocessing_s * 1e9)))
        for name, start_ns, length_ns in spans:
            child = self._tracer.start_span(name, context=parent, start_time=max(start_ns, opened.started_ns))
            child.end(max(start_ns, opened.started_ns) + length_ns)


class TraceIdFilter(logging.Filter):
    """Adds `trace_id` and `span_id` (hex) to log records made while a request span is current."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            record.trace_id = format(context.trace_id, "032x")
            record.span_id = format(context.span_id, "016x")
        return True


def check_available() -> None:
    """Raise ImportError with the install hint unless the OpenTelemetry SDK can be imported."""
    try:
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc


def tracer_from_environment(service_instance: str) -> Tracer:
    """A tracer exporting over OTLP (http/protobuf, else gRPC) as the `OTEL_*` variables say."""
    check_available()
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": "sie", "service.instance.id": service_instance})
    provider = TracerProvider(resource=resource)  # sampler from OTEL_TRACES_SAMPLER(_ARG)
    provider.add_span_processor(BatchSpanProcessor(_otlp_exporter()))
    install_log_correlation()
    return Tracer(provider)


def _otlp_exporter() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[no-redef]
                OTLPSpanExporter,
            )
        except ImportError as exc:
            raise ImportError(INSTALL_HINT) from exc
    return OTLPSpanExporter()


def install_log_correlation() -> None:
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, TraceIdFilter) for f in handler.filters):
            handler.addFilter(TraceIdFilter())
