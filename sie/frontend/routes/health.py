"""Liveness and readiness probes (plain text, as SIE answers them)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from sie.frontend.state import FrontendState


async def live(request: Request) -> Response:
    return PlainTextResponse("ok")


async def ready(request: Request) -> Response:
    """503 while starting, leaving (the drain delay), draining, or with no device able to serve.

    This is what a balancer's health check reads. Overload never shows here: a full queue is the
    client's 503 QUEUE_FULL, not a reason to move this server's models elsewhere.
    """
    state: FrontendState = request.app.state.sie
    if state.is_draining or state.devices.is_draining() or not state.devices.is_ready(state.preload_slots):
        return PlainTextResponse("not ready", status_code=503)
    return PlainTextResponse("ok")
