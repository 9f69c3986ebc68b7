"""build_app: the frontend's Starlette application, with no process or ring knowledge of its own.

Everything a handler needs arrives in `FrontendState`; tests pass a fake `Devices` in it.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp

from sie.errors import SieError
from sie.frontend.auth import BearerAuth
from sie.frontend.client_watch import ClientWatch
from sie.frontend.errors import handle_http_exception, handle_sie_error, handle_unexpected
from sie.frontend.exposition import ServerCollector
from sie.frontend.instance import HEADER as INSTANCE_HEADER
from sie.frontend.instance import instance_id
from sie.frontend.observe import RequestObserver
from sie.frontend.routes import audio, encode, extract, health, metrics, models, openai, openapi, score
from sie.frontend.state import FrontendState
from sie.version import __version__

ROUTES = [
    Route("/v1/encode/{model:path}", encode.encode, methods=["POST"]),
    Route("/v1/score/{model:path}", score.score_route, methods=["POST"]),
    Route("/v1/extract/{model:path}", extract.extract_route, methods=["POST"]),
    Route("/v1/embeddings", openai.embeddings, methods=["POST"]),
    Route("/v1/audio/transcriptions", audio.transcriptions, methods=["POST"]),
    Route("/v1/rerank", score.rerank, methods=["POST"]),
    Route("/v2/rerank", score.rerank_v2, methods=["POST"]),
    Route("/v1/models", models.list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", models.get_model, methods=["GET"]),
    Route("/healthz", health.live, methods=["GET"]),
    Route("/livez", health.live, methods=["GET"]),
    Route("/readyz", health.ready, methods=["GET"]),
    Route("/openapi.json", openapi.openapi, methods=["GET"]),
    Route("/metrics", metrics.metrics, methods=["GET"]),
    Route("/version", metrics.version, methods=["GET"]),
]


class SieApp(Starlette):
    def build_middleware_stack(self) -> ASGIApp:
        # All outside Starlette's whole stack, ServerErrorMiddleware included, so that 500s carry
        # the headers and are counted too. Outermost first: counting and tracing, which also adds
        # X-SIE-Instance and `server` to every response; the client watch (a client that left, stalled while
        # draining, or was answered before its body was read: a 401 too); bearer tokens (a
        # stranger never reaches routing).
        state: FrontendState = self.state.sie
        ops = state.ops
        app: ASGIApp = super().build_middleware_stack()
        if ops.auth_tokens:
            app = BearerAuth(app, ops.auth_tokens, protect_metrics=ops.protect_metrics)
        app = ClientWatch(app, lambda: _is_draining(state))
        instance = (INSTANCE_HEADER, self.state.instance.encode("latin-1", "replace"))
        return RequestObserver(app, ops.recorder, ops.tracer, headers=[instance], rebalancer=ops.rebalancer)


def build_app(state: FrontendState) -> Starlette:
    app = SieApp(
        routes=ROUTES,
        exception_handlers={
            SieError: handle_sie_error,
            HTTPException: handle_http_exception,
            Exception: handle_unexpected,
        },
    )
    app.state.sie = state
    app.state.instance = instance_id(state.settings.instance)
    app.state.openapi = openapi.build_openapi(__version__)
    app.state.metrics_registry = _metrics_registry(state)
    return app


def _metrics_registry(state: FrontendState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    if state.ops.sources is not None:
        registry.register(ServerCollector(state.ops.sources))
    return registry


def _is_draining(state: FrontendState) -> bool:
    return state.is_draining or state.devices.is_draining()
