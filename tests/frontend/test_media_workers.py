"""The frontend's media threads: the caller's context goes along, and no more run than asked."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from sie.catalog import Catalog
from sie.frontend.media.workers import MediaWorkers
from sie.frontend.state import FrontendState
from sie.settings import Settings

REQUEST = contextvars.ContextVar("request", default="none")


def test_runs_off_the_loop_in_the_callers_context() -> None:
    workers = MediaWorkers(2)

    def look() -> tuple[str, str]:
        return threading.current_thread().name, REQUEST.get()

    async def main() -> tuple[str, str]:
        REQUEST.set("req-7")
        return await workers.run(look)

    try:
        thread, seen = asyncio.run(main())
    finally:
        workers.close()
    assert thread.startswith("sie-media") and seen == "req-7"


def most_at_once(workers: MediaWorkers, calls: int) -> int:
    """How many of `calls` sleeping jobs ran together on `workers`."""
    lock = threading.Lock()
    running, most = [0], [0]

    def decode(seconds: float) -> float:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(seconds)
        with lock:
            running[0] -= 1
        return seconds

    async def main() -> list[float]:
        return await asyncio.gather(*(workers.run(decode, 0.05) for _ in range(calls)))

    try:
        assert asyncio.run(main()) == [0.05] * calls
    finally:
        workers.close()
    return most[0]


def test_at_most_the_configured_threads_work_at_once() -> None:
    assert most_at_once(MediaWorkers(2), 6) == 2


def test_a_frontends_pool_has_the_threads_its_settings_ask_for() -> None:
    state = FrontendState(settings=Settings(media_threads=3), catalog=Catalog([]), devices=None)  # type: ignore[arg-type]
    assert most_at_once(state.media, 6) == 3


def test_start_runs_in_the_background_and_logs_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    workers = MediaWorkers(1)
    ran = threading.Event()

    def fail() -> None:
        ran.set()
        raise RuntimeError("no compiler today")

    try:
        workers.start(fail)
        assert ran.wait(5)
        deadline = time.monotonic() + 5
        while "media background work failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        workers.close()
    assert "media background work failed" in caplog.text
