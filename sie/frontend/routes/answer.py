"""The success response every operation route sends: its body, stage timings and content type."""

from __future__ import annotations

import time
from typing import Protocol

from starlette.responses import Response

from sie.frontend.render import Timing, timing_headers


class StageTimes(Protocol):
    queue_ms: float
    tokenization_ms: float
    inference_ms: float


def stage_timing(started_s: float, stages: StageTimes) -> Timing:
    """Timing of a request that began at `started_s` (perf_counter) and ran `stages`."""
    return Timing(
        total_ms=(time.perf_counter() - started_s) * 1000,
        queue_ms=stages.queue_ms,
        tokenization_ms=stages.tokenization_ms,
        inference_ms=stages.inference_ms,
    )


def answer(content: bytes, timing: Timing, server_version: str, *, as_json: bool) -> Response:
    return Response(
        content,
        headers=timing_headers(timing, server_version),
        media_type="application/json" if as_json else "application/msgpack",
    )
