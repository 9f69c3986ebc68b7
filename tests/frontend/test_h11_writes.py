"""Responses leave in one write: the head waits for the body's first bytes, empty writes are skipped."""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from hypercorn.events import RawData

from sie.frontend.h11_writes import send_h11_event


class Protocol:
    """What `send_h11_event` uses of hypercorn's H11Protocol: an h11 connection and `send`."""

    def __init__(self) -> None:
        self.connection = h11.Connection(h11.SERVER)
        self.connection.receive_data(b"POST /v1/encode/m HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        assert isinstance(self.connection.next_event(), h11.Request)
        assert isinstance(self.connection.next_event(), h11.Data)
        self.writes: list[bytes] = []

    async def send(self, event: Any) -> None:
        assert isinstance(event, RawData)
        self.writes.append(event.data)


def respond(protocol: Protocol, headers: list[tuple[bytes, bytes]], body: bytes) -> list[bytes]:
    async def run() -> None:
        await send_h11_event(protocol, h11.Response(status_code=200, headers=headers))
        if body:
            await send_h11_event(protocol, h11.Data(data=body))
        await send_h11_event(protocol, h11.EndOfMessage())

    asyncio.run(run())
    return protocol.writes


def test_a_response_with_a_body_is_one_write() -> None:
    writes = respond(
        Protocol(), [(b"content-length", b"11"), (b"content-type", b"application/json")], b'{"ok":true}'
    )
    assert len(writes) == 1
    assert writes[0].startswith(b"HTTP/1.1 200 ") and writes[0].endswith(b'\r\n\r\n{"ok":true}')


def test_a_response_without_a_body_goes_out_at_once() -> None:
    protocol = Protocol()

    async def head_only() -> None:
        await send_h11_event(protocol, h11.Response(status_code=503, headers=[(b"content-length", b"0")]))

    asyncio.run(head_only())
    assert len(protocol.writes) == 1 and protocol.writes[0].startswith(b"HTTP/1.1 503 ")
