"""Watching the client while a request runs: one that left, or one that stopped sending.

- Gone: once the body is in, a watcher waits for `http.disconnect`. If it comes before the
  response starts, the handler is cancelled: the device client then withdraws the request's
  queued items (they are dropped before a batch forms, never computed) and nothing is rendered.
- Stalled: while the server drains, a body that has not grown for `STALL_S` ends the request with
  503 SHUTTING_DOWN (the connection closes with it), so a client that stopped sending cannot hold
  SIGTERM for the whole graceful timeout. Outside a drain a slow upload is left alone.
- Unread: a request answered before its body was read (413, 401, 404) has the rest of its body
  taken and dropped. hypercorn keeps a keep-alive connection only if the request's body was all
  in when the app returned, and otherwise closes it without a word, so a client that sent the next
  request on it got a dropped connection. So the answer first waits up to `TAKE_REST_S` for the
  rest of the body; if it does not come (a large upload refused, a client waiting for
  100-continue), the answer says `connection: close` and the rest is taken in the background.
  hypercorn queues body chunks for the app in a bounded queue and, once the answer is sent, queues
  a disconnect there too, inside the app's own last `send`; with the queue full and nobody reading
  it, that send never returned, and the connection held SIGTERM for the whole graceful timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sie.errors import ShuttingDown
from sie.frontend.observe import current
from sie.frontend.rebalance import CLOSE_HEADER

STALL_S = 1.0
TAKE_REST_S = 0.05  # how long an early answer waits for the rest of its request's body
_SLICE_S = 0.25  # how often a waiting read looks at the drain flag


class ClientWatch:
    def __init__(self, app: ASGIApp, is_draining: Callable[[], bool]) -> None:
        self.app = app
        self.is_draining = is_draining
        self._drains: set[asyncio.Task[None]] = set()  # held here so they are not collected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        http1 = _is_http1(scope)
        has_body = _declares_body(scope) if http1 else True  # HTTP/2 streams a body with neither header
        watch = _Watch(receive, send, self.is_draining, has_body=has_body, http1=http1)
        try:
            await self.app(scope, watch.receive, watch.send)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not watch.client_left or task is None or task.uncancel() > 0:
                raise  # a cancellation of our own caller: let it through
            if (record := current()) is not None:
                record.disconnected = True
        finally:
            watch.stop()
            if not watch.body_ended and watch.drain is None:  # no answer went out (an exception)
                watch.drain = asyncio.ensure_future(_discard_body(receive))
            if watch.drain is not None and not watch.drain.done():
                self._drains.add(watch.drain)
                watch.drain.add_done_callback(self._drains.discard)


class _StallLook:
    """Every `_SLICE_S` while one body read waits: past `STALL_S` of silence during a drain,
    cancel the reading task (which then raises ShuttingDown)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any] | None, is_draining: Callable[[], bool]
    ) -> None:
        self.task = task
        self.stalled = False
        self._loop = loop
        self._is_draining = is_draining
        self._silent_s = 0.0
        self._timer = loop.call_later(_SLICE_S, self._look)

    def _look(self) -> None:
        self._silent_s += _SLICE_S
        if self._silent_s >= STALL_S and self.task is not None and self._is_draining():
            self.stalled = True
            self.task.cancel()
            return
        self._timer = self._loop.call_later(_SLICE_S, self._look)

    def stop(self) -> None:
        self._timer.cancel()


def _is_http1(scope: Scope) -> bool:
    return scope.get("http_version") in ("1.0", "1.1")


def _declares_body(scope: Scope) -> bool:
    """HTTP/1.x: a request has a body only if it says so (Content-Length or Transfer-Encoding)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


async def _discard_body(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


class _Watch:
    def __init__(
        self,
        receive: Receive,
        send: Send,
        is_draining: Callable[[], bool],
        *,
        has_body: bool = True,
        http1: bool = True,
    ) -> None:
        self._receive = receive
        self._http1 = http1  # the `connection` header is HTTP/1's alone
        self._send = send
        self._is_draining = is_draining
        self._task = asyncio.current_task()
        self._watcher: asyncio.Task[Message] | None = None
        self.response_started = False
        self.client_left = False
        # The last body chunk, or a disconnect, has been received; or there is no body to take
        # (hypercorn's one empty body message then waits unread, far below its queue's bound).
        self.body_ended = not has_body
        self.drain: asyncio.Task[None] | None = None  # takes an unread body once the answer starts

    async def receive(self) -> Message:
        if self._watcher is not None:  # the body is in: whatever comes next is the watcher's
            return await asyncio.shield(self._watcher)
        message = await self._next_body_message()
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.body_ended = True
            self._watcher = asyncio.ensure_future(self._watch_disconnect())
            if message["type"] == "http.disconnect":
                self._watcher.cancel()
                self._watcher = None
        return message

    async def _next_body_message(self) -> Message:
        # A timer looks at the silence, not a task racing the read: most bodies are already
        # queued, and a task plus a timed wait per read cost more than the rest of the watch.
        loop = asyncio.get_running_loop()
        look = _StallLook(loop, asyncio.current_task(), self._is_draining)
        try:
            return await self._receive()
        except asyncio.CancelledError:
            if look.stalled and look.task is not None and look.task.uncancel() == 0:
                raise ShuttingDown("Server is shutting down and the request body stopped arriving") from None
            raise
        finally:
            look.stop()

    async def _watch_disconnect(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" and not self.response_started:
            self.client_left = True
            if self._task is not None:
                self._task.cancel()
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
            if not self.body_ended and self._watcher is None and not await self._take_rest():
                if self._http1:
                    message["headers"] = [*message.get("headers", ()), CLOSE_HEADER]
                self.drain = asyncio.ensure_future(_discard_body(self._receive))
        await self._send(message)

    async def _take_rest(self) -> bool:
        """Take and drop the rest of an unread body if it all arrives within `TAKE_REST_S`;
        whether it did (a cancelled read loses no message: hypercorn's queue keeps it)."""
        try:
            async with asyncio.timeout(TAKE_REST_S):
                await _discard_body(self._receive)
        except TimeoutError:
            return False
        self.body_ended = True
        return True

    def stop(self) -> None:
        """End the watcher once the request is over. After a whole answer it needs no cancelling:
        hypercorn queues the disconnect inside the last send, so the watcher's read has already
        completed and its task runs to its end before any callback scheduled now. A cancelled
        task leaves its CancelledError, tracebacks and frames in a reference cycle (about 30
        objects a request for the cyclic collector); the fallback cancels only a watcher that is
        still waiting then (a server that queues no disconnect, an answer cut short)."""
        if self._watcher is not None and not self._watcher.done():
            asyncio.get_running_loop().call_soon(_cancel_if_pending, self._watcher)
            self._watcher = None


def _cancel_if_pending(task: asyncio.Task[Message]) -> None:
    if not task.done():
        task.cancel()
