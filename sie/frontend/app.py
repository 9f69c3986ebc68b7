"""build_app: the frontend's Starlette application, with no process or ring knowledge of its own.

Everything a handler needs arrives in `FrontendState`; tests pass a fake `Devices` in it.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp

from sie.errors import SieError
from sie.frontend.errors import handle_http_exception, handle_sie_error, handle_unexpected
from sie.frontend.instance import InstanceHeader, instance_id
from sie.frontend.routes import encode, extract, health, models, openai, openapi, score
from sie.frontend.state import FrontendState

ROUTES = [
    Route("/v1/encode/{model:path}", encode.encode, methods=["POST"]),
    Route("/v1/score/{model:path}", score.score_route, methods=["POST"]),
    Route("/v1/extract/{model:path}", extract.extract_route, methods=["POST"]),
    Route("/v1/embeddings", openai.embeddings, methods=["POST"]),
    Route("/v1/rerank", score.rerank, methods=["POST"]),
    Route("/v1/models", models.list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", models.get_model, methods=["GET"]),
    Route("/healthz", health.live, methods=["GET"]),
    Route("/livez", health.live, methods=["GET"]),
    Route("/readyz", health.ready, methods=["GET"]),
    Route("/openapi.json", openapi.openapi, methods=["GET"]),
]


class SieApp(Starlette):
    def build_middleware_stack(self) -> ASGIApp:
        # Outside Starlette's whole stack, ServerErrorMiddleware included, so 500s carry it too.
        return InstanceHeader(super().build_middleware_stack(), self.state.instance)


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
    app.state.openapi = openapi.build_openapi(state.server_version)
    return app
