"""What happened to each request: route, model, status, error code, stage times; counted once at the end.

An outer ASGI middleware opens a `RequestRecord` per request and puts it in a context variable;
the code that learns something (the model lookup, the device submit, the error renderer) notes it
there, and the middleware hands the finished record to the statistics block and, when tracing is
on, to the tracer. Nothing here blocks or allocates per item.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sie.frontend.rebalance import CLOSE_HEADER
from sie.metrics.labels import route_of
from sie.version import __version__

if TYPE_CHECKING:
    from sie.frontend.rebalance import ConnectionRebalancer
    from sie.frontend.tracing import Tracer
    from sie.metrics.recorders import FrontendRecorder

# Routes whose total time is a request's latency; probes and scrapes would only dilute it.
_TIMED_ROUTES = frozenset({"encode", "score", "extract", "embeddings", "rerank", "transcriptions"})
SERVER_HEADER = (b"server", f"sie/{__version__}".encode())


@dataclass(slots=True)
class RequestRecord:
    route: str
    started_s: float = field(default_factory=time.perf_counter)
    model: int | None = None
    model_name: str | None = None
    status: int = 0
    code: str | None = None
    items: int = 0
    tokens: int = 0
    tokenization_s: float = 0.0
    queue_s: float = 0.0
    inference_s: float = 0.0
    results_at_s: float | None = None
    postprocessing_s: float | None = None
    disconnected: bool = False

    def stages_s(self, total_s: float) -> dict[str, float]:
        if self.route not in _TIMED_ROUTES:
            return {}
        stages = {"total": total_s}
        if self.results_at_s is not None:  # the request reached a device
            stages.update(tokenization=self.tokenization_s, queue=self.queue_s, inference=self.inference_s)
            if self.postprocessing_s is not None:
                stages["postprocessing"] = self.postprocessing_s
        return stages


_current: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar("sie_request", default=None)


def current() -> RequestRecord | None:
    return _current.get()


def note_model(slot: int, name: str) -> None:
    if (record := _current.get()) is not None:
        record.model, record.model_name = slot, name


def note_error(code: str) -> None:
    if (record := _current.get()) is not None:
        record.code = code


def note_work(items: int, tokens: int, tokenization_ms: float, queue_ms: float, inference_ms: float) -> None:
    """One device submission finished (a request may make several: they add up)."""
    if (record := _current.get()) is not None:
        record.items += items
        record.tokens += tokens
        record.tokenization_s += tokenization_ms / 1000
        record.queue_s += queue_ms / 1000
        record.inference_s += inference_ms / 1000
        record.results_at_s = time.perf_counter()


class RequestObserver:
    """Outermost middleware: sees every response, 401s and 500s included, and adds `server` and
    the caller's fixed headers (X-SIE-Instance) to each."""

    def __init__(
        self,
        app: ASGIApp,
        recorder: FrontendRecorder | None,
        tracer: Tracer | None,
        headers: Sequence[tuple[bytes, bytes]] = (),
        rebalancer: ConnectionRebalancer | None = None,
    ) -> None:
        self.app = app
        self.recorder = recorder
        self.tracer = tracer
        self.rebalancer = rebalancer
        # Added to every response here, in the one send wrapper every request already pays for.
        self.headers = [SERVER_HEADER, *headers]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = RequestRecord(route_of(scope["path"]))
        token = _current.set(record)

        async def send_observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                if record.results_at_s is not None:
                    record.postprocessing_s = time.perf_counter() - record.results_at_s
                message["headers"] = [*message.get("headers", ()), *self.headers]
                # HTTP/1.1 only: h2 multiplexes its requests and forbids the `connection` header.
                http11 = scope.get("http_version") == "1.1"
                if (
                    counted
                    and http11
                    and self.rebalancer is not None
                    and CLOSE_HEADER not in message["headers"]  # closing already: an unread body
                    and self.rebalancer.should_close()
                ):
                    message["headers"].append(CLOSE_HEADER)
                    self.recorder.rebalanced()  # type: ignore[union-attr]
            await send(message)

        span = self.tracer.start(scope, record) if self.tracer is not None else None
        counted = self.recorder is not None and record.route in _TIMED_ROUTES
        if counted:
            self.recorder.started()  # type: ignore[union-attr]
        try:
            await self.app(scope, receive, send_observed)
        finally:
            if counted:
                self.recorder.finished()  # type: ignore[union-attr]
            _current.reset(token)
            total_s = time.perf_counter() - record.started_s
            if record.status == 0:  # no response went out: an exception, or the client left
                record.status = 499 if record.disconnected else 500
            if self.recorder is not None:
                self._count(record, total_s)
            if span is not None and self.tracer is not None:
                self.tracer.finish(span, record, total_s)

    def _count(self, record: RequestRecord, total_s: float) -> None:
        assert self.recorder is not None
        self.recorder.request(
            route=record.route,
            model=record.model,
            status=record.status,
            code=record.code,
            stages_s=record.stages_s(total_s),
            disconnected=record.disconnected,
        )
        if record.model is not None and record.items:
            self.recorder.work(record.model, record.items, record.tokens)
