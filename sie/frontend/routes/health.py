"""Liveness and readiness probes (plain text, as SIE answers them)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from sie.frontend.state import FrontendState


async def live(request: Request) -> Response:
    return PlainTextResponse("ok")


async def ready(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    if state.is_draining or state.devices.is_draining() or not state.devices.is_ready(state.preload_slots):
        return PlainTextResponse("not ready", status_code=503)
    return PlainTextResponse("ok")
