"""GET /metrics (Prometheus text format, or OpenMetrics on request) and GET /version."""

from __future__ import annotations

import asyncio

import msgspec
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import Response

from sie.version import SIE_PROTOCOL_VERSION, __version__


async def metrics(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.metrics_registry
    # prometheus-client picks the format the scraper's Accept asks for (text 0.0.4 by default).
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    # Off the event loop: a scrape reads NVML and /proc, which must not stall requests meanwhile.
    body = await asyncio.to_thread(encoder, registry)
    return Response(body, headers={"content-type": content_type})


async def version(request: Request) -> Response:
    body = {"version": __version__, "sie_protocol_version": SIE_PROTOCOL_VERSION}
    return Response(msgspec.json.encode(body), media_type="application/json")
