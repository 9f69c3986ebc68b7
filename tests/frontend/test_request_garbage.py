"""Answered requests leave nothing for the cyclic garbage collector: the frontend app behind real
hypercorn on a real socket, the collector off while requests run, then asked what it would free.

Objects in reference cycles outlive their request until a collection walks every young object;
a frontend under load then pays for collections on every few requests.
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypercorn.asyncio import serve
from hypercorn.config import Config

from sie.frontend.app import build_app
from sie.frontend.client_watch import ClientWatch
from sie.frontend.state import FrontendState
from sie.settings import Settings
from tests.frontend.test_app import MINILM, FakeDevices, catalog

BODY = json.dumps({"items": [{"text": "a short sentence"}, {"text": "and another"}]}).encode()
REQUEST = (
    f"POST /v1/encode/{MINILM} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    f"accept: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n"
).encode() + BODY
REQUESTS = 30


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status, *headers = head.split(b"\r\n")
    fields = dict(h.partition(b":")[::2] for h in headers)
    length = int(fields[b"content-length"])
    return status, await reader.readexactly(length)


async def serve_and_count(app: Any) -> tuple[list[bytes], int]:
    """Serve `app`, answer REQUESTS on one keep-alive connection, then count what the collector
    finds (the connection still open, so only what the requests left can be garbage)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{listener.detach()}"]  # hypercorn's to close
    config.accesslog = None
    stop = asyncio.Event()
    server = asyncio.ensure_future(serve(app, config, shutdown_trigger=stop.wait))
    try:
        # The socket listens already: the kernel queues this connection until hypercorn accepts it.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        statuses = []
        for _ in range(3):  # first-use caches (tokenizer, routes) are not garbage
            writer.write(REQUEST)
            await read_response(reader)
        gc.collect()
        for _ in range(REQUESTS):
            writer.write(REQUEST)
            status, _body = await read_response(reader)
            statuses.append(status)
        await asyncio.sleep(0.05)  # whatever the last request scheduled has run
        found = gc.collect()
        writer.close()
        return statuses, found
    finally:
        stop.set()
        await server


def test_encode_requests_through_hypercorn_leave_no_cycles(collector_off: None) -> None:
    devices = FakeDevices(catalog())
    state = FrontendState(settings=Settings(), catalog=devices.catalog, devices=devices)
    statuses, found = asyncio.run(serve_and_count(build_app(state)))
    assert statuses == [b"HTTP/1.1 200 "] * REQUESTS
    assert len(devices.batches) == REQUESTS + 3
    assert found == 0


async def answer_after_body(scope: Any, receive: Any, send: Any) -> None:
    while (await receive()).get("more_body", False):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_watched_request_leaves_no_cycles(collector_off: None) -> None:
    """The client watch alone: its disconnect watcher ends by itself once hypercorn queues the
    disconnect after the answer (a cancelled watcher left a cycle of about 30 objects)."""
    statuses, found = asyncio.run(serve_and_count(ClientWatch(answer_after_body, lambda: False)))
    assert statuses == [b"HTTP/1.1 200 "] * REQUESTS
    assert found == 0
