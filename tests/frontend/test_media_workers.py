"""The frontend's media threads: the caller's context goes along, and no more run than asked."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

from sie.frontend.media.workers import MediaWorkers

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


def test_at_most_the_configured_threads_work_at_once() -> None:
    workers = MediaWorkers(2)
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
        return await asyncio.gather(*(workers.run(decode, 0.05) for _ in range(6)))

    try:
        assert asyncio.run(main()) == [0.05] * 6
    finally:
        workers.close()
    assert most[0] == 2
