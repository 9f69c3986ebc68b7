"""The client watch at the ASGI level: a client that leaves cancels its request; a stalled body
ends a request only while the server drains."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from sie.errors import ShuttingDown
from sie.frontend import client_watch
from sie.frontend.client_watch import ClientWatch
from sie.frontend.observe import RequestObserver
from sie.metrics.labels import ROUTES, STATUSES
from sie.metrics.recorders import FrontendRecorder
from tests.metrics.blocks import made_blocks

SCOPE = {
    "type": "http",
    "method": "POST",
    "path": "/v1/encode/m",
    "headers": [(b"transfer-encoding", b"chunked")],
}
Message = dict[str, Any]


class Peer:
    """The server side hypercorn would be: a queue of messages to the app, a list of what it sent."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        return await self.inbox.get()

    async def send(self, message: Message) -> None:
        self.sent.append(message)


async def read_body(receive: Callable[[], Any]) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


async def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.001)


def test_a_client_that_leaves_cancels_the_waiting_handler() -> None:
    events: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert await read_body(receive) == b"abc"
        events.append("body read")
        try:
            await asyncio.Event().wait()  # waiting on a device that would never answer
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    async def main() -> Peer:
        peer = Peer()
        with made_blocks(n_devices=1, n_frontends=1, n_models=1) as blocks:
            observed = RequestObserver(
                ClientWatch(app, lambda: False), FrontendRecorder(blocks.stats, 0), None
            )
            await peer.inbox.put({"type": "http.request", "body": b"ab", "more_body": True})
            await peer.inbox.put({"type": "http.request", "body": b"c", "more_body": False})
            task = asyncio.ensure_future(observed(SCOPE, peer.receive, peer.send))
            await wait_for(lambda: events == ["body read"])
            await peer.inbox.put({"type": "http.disconnect"})
            async with asyncio.timeout(10):
                await task  # returns normally: the cancellation was ours
            v = blocks.stats.v
            assert v["requests"][0, ROUTES.index("encode"), blocks.stats.none_slot, STATUSES.index(499)] == 1
            assert v["disconnects"][0].tolist() == [0, 1]
        return peer

    peer = asyncio.run(main())
    assert events == ["body read", "cancelled"]
    assert peer.sent == []


def test_a_normal_request_is_untouched_and_leaves_no_watcher() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert await read_body(receive) == b"{}"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> Peer:
        peer = Peer()
        await peer.inbox.put({"type": "http.request", "body": b"{}", "more_body": False})
        before = len(asyncio.all_tasks())
        await ClientWatch(app, lambda: False)(SCOPE, peer.receive, peer.send)
        # This peer queues no disconnect after the answer (hypercorn does): the watch cancels its
        # watcher a turn later, and the watcher ends the turn after.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(asyncio.all_tasks()) == before
        return peer

    peer = asyncio.run(main())
    assert [m["type"] for m in peer.sent] == ["http.response.start", "http.response.body"]


def test_a_disconnect_after_the_response_started_cancels_nothing() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"late but whole"})

    async def main() -> Peer:
        peer = Peer()
        await peer.inbox.put({"type": "http.request", "body": b"", "more_body": False})
        await peer.inbox.put({"type": "http.disconnect"})
        await ClientWatch(app, lambda: False)(SCOPE, peer.receive, peer.send)
        return peer

    assert asyncio.run(main()).sent[-1]["body"] == b"late but whole"


@pytest.fixture
def quick_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_watch, "STALL_S", 0.05)
    monkeypatch.setattr(client_watch, "_SLICE_S", 0.01)


@pytest.mark.usefixtures("quick_stall")
def test_a_stalled_body_ends_the_request_while_draining() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await read_body(receive)

    async def main() -> None:
        peer = Peer()
        await peer.inbox.put({"type": "http.request", "body": b"half", "more_body": True})
        async with asyncio.timeout(10):
            await ClientWatch(app, lambda: True)(SCOPE, peer.receive, peer.send)

    with pytest.raises(ShuttingDown, match="stopped arriving"):
        asyncio.run(main())


@pytest.mark.usefixtures("quick_stall")
def test_a_slow_body_is_left_alone_when_not_draining() -> None:
    looks: list[bool] = []

    def is_draining() -> bool:
        looks.append(False)
        return False

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert await read_body(receive) == b"slow but complete"

    async def main() -> None:
        peer = Peer()
        await peer.inbox.put({"type": "http.request", "body": b"slow ", "more_body": True})
        task = asyncio.ensure_future(ClientWatch(app, is_draining)(SCOPE, peer.receive, peer.send))
        await wait_for(lambda: len(looks) >= 20)  # well past the stall time, several times over
        await peer.inbox.put({"type": "http.request", "body": b"but complete", "more_body": False})
        async with asyncio.timeout(10):
            await task

    asyncio.run(main())


def test_a_request_without_a_body_leaves_no_drain() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> None:
        peer = Peer()
        await peer.inbox.put({"type": "http.request", "body": b"", "more_body": False})
        watch = ClientWatch(app, lambda: False)
        before = len(asyncio.all_tasks())
        get = {"type": "http", "http_version": "1.1", "method": "GET", "path": "/healthz", "headers": []}
        await watch(get, peer.receive, peer.send)
        assert len(asyncio.all_tasks()) == before and not watch._drains

    asyncio.run(main())


def test_a_body_left_unread_is_drained_after_the_answer() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # answers 413 from the headers alone
        await send({"type": "http.response.start", "status": 413, "headers": []})
        await send({"type": "http.response.body", "body": b"too big"})

    async def main() -> Peer:
        peer = Peer()
        watch = ClientWatch(app, lambda: False)
        await watch(SCOPE, peer.receive, peer.send)
        for _ in range(3):  # the client goes on sending; hypercorn queues it for the app
            await peer.inbox.put({"type": "http.request", "body": b"x" * 1000, "more_body": True})
        await peer.inbox.put({"type": "http.request", "body": b"", "more_body": False})
        await wait_for(lambda: peer.inbox.empty() and not watch._drains)  # all taken, drain done
        return peer

    assert asyncio.run(main()).sent[0]["status"] == 413


def answer_early(status: int) -> Callable[[Any, Any, Any], Any]:
    async def app(scope: Any, receive: Any, send: Any) -> None:  # answers from the headers alone
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"no"})

    return app


def test_an_early_answer_waits_briefly_for_the_body_and_keeps_the_connection() -> None:
    async def main() -> tuple[Peer, ClientWatch]:
        peer = Peer()
        watch = ClientWatch(answer_early(404), lambda: False)

        async def client_sends_its_body() -> None:  # a moment after its headers, as clients do
            await asyncio.sleep(client_watch.TAKE_REST_S / 5)
            await peer.inbox.put({"type": "http.request", "body": b"x" * 1000, "more_body": True})
            await peer.inbox.put({"type": "http.request", "body": b"", "more_body": False})

        sending = asyncio.ensure_future(client_sends_its_body())
        await watch({**SCOPE, "http_version": "1.1"}, peer.receive, peer.send)
        await sending
        return peer, watch

    peer, watch = asyncio.run(main())
    start = peer.sent[0]
    assert start["status"] == 404 and (b"connection", b"close") not in start["headers"]
    assert peer.inbox.empty() and not watch._drains  # the body was taken before the answer


def test_an_early_answer_without_the_body_says_close() -> None:
    async def main() -> tuple[Peer, ClientWatch]:
        peer = Peer()
        watch = ClientWatch(answer_early(413), lambda: False)
        await watch({**SCOPE, "http_version": "1.1"}, peer.receive, peer.send)  # no body comes in time
        await peer.inbox.put({"type": "http.request", "body": b"", "more_body": False})
        await wait_for(lambda: peer.inbox.empty() and not watch._drains)  # taken in the background
        return peer, watch

    peer, _ = asyncio.run(main())
    assert peer.sent[0]["status"] == 413 and (b"connection", b"close") in peer.sent[0]["headers"]


def test_http2_never_gets_a_connection_header() -> None:
    async def main() -> Peer:
        peer = Peer()
        watch = ClientWatch(answer_early(404), lambda: False)
        await watch({**SCOPE, "http_version": "2"}, peer.receive, peer.send)
        await peer.inbox.put({"type": "http.request", "body": b"", "more_body": False})
        await wait_for(lambda: peer.inbox.empty() and not watch._drains)
        return peer

    assert not any(name == b"connection" for name, _ in asyncio.run(main()).sent[0]["headers"])
