"""The one place an exception becomes an HTTP error response.

SIE routes raise `SieError`s and Starlette's own `HTTPException` (404 route, 405 method); both get
the contract's JSON shape here. The OpenAI routes render the same exceptions in OpenAI's shape.
"""

from __future__ import annotations

import logging

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from sie.errors import ModelNotFound, SieError
from sie.frontend.observe import note_error
from sie.frontend.render import render_error, render_openai_error

log = logging.getLogger(__name__)

JSON = "application/json"
_OPENAI_CODES = {404: "model_not_found", 413: "input_too_long"}


def _headers(error: SieError) -> dict[str, str]:
    return {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else {}


def sie_error_response(error: SieError) -> Response:
    note_error(error.code)  # for /metrics and tracing
    return Response(
        render_error(error.code, error.message), error.status, headers=_headers(error), media_type=JSON
    )


def openai_error_response(error: SieError, param: str | None = None) -> Response:
    note_error(error.code)
    kind = "invalid_request_error" if error.status < 500 else "server_error"
    code = _OPENAI_CODES.get(error.status, error.code.lower())
    body = render_openai_error(error.message, kind, param, code)
    return Response(body, error.status, headers=_headers(error), media_type=JSON)


async def handle_sie_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SieError)
    if request.url.path.startswith("/v1/embeddings"):
        return openai_error_response(exc)
    return sie_error_response(exc)


_MODEL_ROUTES = ("/v1/encode/", "/v1/score/", "/v1/extract/", "/v1/models/")


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    path = request.scope["path"]  # as routed (`request.url` would drop the newline that failed it)
    if exc.status_code == 404 and path.startswith(_MODEL_ROUTES):
        # A model route that did not match: its model id holds what no id can (a newline, ...).
        return sie_error_response(ModelNotFound(path.split("/", 3)[3]))
    body = msgspec.json.encode({"detail": exc.detail})
    return Response(body, exc.status_code, headers=exc.headers, media_type=JSON)


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error", extra={"path": request.url.path})
    note_error("INTERNAL_ERROR")
    return Response(render_error("INTERNAL_ERROR", "Internal server error"), 500, media_type=JSON)
