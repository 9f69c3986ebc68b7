"""The threads of one frontend that decode and resize images and decode and resample audio.

Pillow, libsndfile and soxr release the GIL while they work, so decoding runs beside the event
loop. But between those calls a decode holds the GIL (Pillow's header parsing and `load` loop are
Python), and every extra thread queued for it makes each hand-off a futex wake and a context
switch. Two threads keep a frontend's core busy, one in C while the other takes the GIL; asyncio's
default executor (cores + 4) left up to six decodes of one frontend fighting for it. Under the
image benchmark (2 frontends on 2 cores, `wrk` with 8 connections) the frontends' CPU per image
fell 7.97 -> 7.17 ms and images/s rose 202 -> 228 (means of four alternating pairs); one thread
per frontend was cheaper still per image but left the cores idle between decodes.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class MediaWorkers:
    """A small pool of its own, so media work never queues behind (or ahead of) other threads'."""

    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="sie-media")

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn(*args)` on a media thread, in the caller's context (as `asyncio.to_thread`)."""
        context = contextvars.copy_context()
        call = functools.partial(context.run, fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def start(self, fn: Callable[[], object]) -> None:
        """`fn()` on a media thread, not waited for; a failure is logged."""
        self._pool.submit(fn).add_done_callback(_log_failure)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _log_failure(done: Future[object]) -> None:
    if not done.cancelled() and (error := done.exception()) is not None:
        log.warning("media background work failed", exc_info=error)
