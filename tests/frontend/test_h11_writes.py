"""Responses leave in one write: hypercorn's own H11Protocol, patched, answering real requests.

Each case runs the same request through the protocol unpatched and patched, and compares what it
hands its transport: the same bytes, in one write where the response declares a body.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from typing import Any

import pytest
from hypercorn.app_wrappers import ASGIWrapper
from hypercorn.asyncio.task_group import TaskGroup
from hypercorn.asyncio.worker_context import WorkerContext
from hypercorn.config import Config
from hypercorn.events import Closed, RawData
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.typing import ConnectionState

from sie.frontend import h11_writes

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
POST = b"POST /v1/encode/m HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
HYPERCORNS = H11Protocol._send_h11_event  # its own method, as imported (nothing has patched it yet)


async def json_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def streaming_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"one", "more_body": True})
    await send({"type": "http.response.body", "body": b"two"})


async def empty_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 503, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


def writes(app: App, request: bytes, patched: bool, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What hypercorn's H11Protocol hands its transport while answering `request` with `app`."""
    assert HYPERCORNS is not h11_writes.send_h11_event
    with monkeypatch.context() as patch:
        method = h11_writes.send_h11_event if patched else HYPERCORNS
        patch.setattr(H11Protocol, "_send_h11_event", method)
        sent = asyncio.run(_serve_one(app, request))
    # Two runs may straddle a second: the date header is the one byte range allowed to differ.
    return [re.sub(rb"date: [^\r]*", b"date: -", chunk) for chunk in sent]


async def _serve_one(app: App, request: bytes) -> list[bytes]:
    sent: list[bytes] = []
    done = asyncio.Event()

    async def send(event: Any) -> None:
        if isinstance(event, RawData):
            sent.append(event.data)
        elif isinstance(event, Closed):
            done.set()

    async def observed(scope: dict[str, Any], receive: Any, send_asgi: Any) -> None:
        await app(scope, receive, send_asgi)
        done.set()

    async with TaskGroup(asyncio.get_running_loop()) as task_group:
        protocol = H11Protocol(
            ASGIWrapper(observed),  # type: ignore[arg-type]
            Config(),
            WorkerContext(None),
            task_group,
            ConnectionState({}),
            False,
            ("127.0.0.1", 50000),
            ("127.0.0.1", 8080),
            send,
        )
        await protocol.handle(RawData(data=request))
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(0.05)  # the stream's end-of-message follows the app's last send
        await protocol.handle(Closed())
    return sent


def test_hypercorn_is_the_minor_version_the_patch_is_pinned_to(monkeypatch: pytest.MonkeyPatch) -> None:
    assert version("hypercorn").startswith("0.18."), version("hypercorn")  # pyproject pins <0.19
    monkeypatch.setattr(H11Protocol, "_send_h11_event", HYPERCORNS)  # put back after the test
    assert h11_writes.install() is True
    assert H11Protocol._send_h11_event is h11_writes.send_h11_event


@pytest.mark.parametrize(("app", "one_write"), [(json_app, True), (streaming_app, False), (empty_app, False)])
def test_the_bytes_are_hypercorns_and_a_declared_body_goes_with_its_head(
    app: App, one_write: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = writes(app, POST, patched=False, monkeypatch=monkeypatch)
    patched = writes(app, POST, patched=True, monkeypatch=monkeypatch)
    assert b"".join(patched) == b"".join(plain) and plain[0].startswith(b"HTTP/1.1 ")
    assert b"" not in patched  # no empty writes
    if one_write:
        assert len(plain) >= 2 and len(patched) == 1  # head, body (and an empty end) became one
    else:
        assert [w for w in plain if w] == patched  # as hypercorn writes them, empty ones left out


def test_an_error_hypercorn_writes_itself_goes_out_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = b"GET / HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n"
    plain = writes(json_app, bad, patched=False, monkeypatch=monkeypatch)
    patched = writes(json_app, bad, patched=True, monkeypatch=monkeypatch)
    assert patched == [w for w in plain if w] and patched[0].startswith(b"HTTP/1.1 400 ")
