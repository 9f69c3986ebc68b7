"""One socket write per HTTP/1.1 response instead of three.

hypercorn's HTTP/1.1 protocol writes each h11 event as it comes: the response head, then the body,
then an empty end-of-message (which still takes the connection's send lock and a drain). For the
small answers this server gives, those are a system call and a lock round more than needed: a
frontend profile under load spent a tenth of its time in socket writes. And a process killed
between the head and the body leaves its client a head with no body, which no balancer can
retry (a response has begun).

`install()` replaces hypercorn's `H11Protocol._send_h11_event` with one that keeps the head of a
response that declares a body (Content-Length above 0) until the body's first bytes, sends them
together, and skips empty writes. Responses without a declared body (errors hypercorn writes
itself, streams, 100-continue) go out as before. It patches a private method, so pyproject.toml
pins hypercorn's minor version and a test runs hypercorn's own H11Protocol with and without it;
`install()` leaves hypercorn alone if the method is missing.
"""

from __future__ import annotations

import logging
from typing import Any

import h11
from hypercorn.events import RawData

log = logging.getLogger(__name__)

_HEAD = "_sie_pending_head"


async def send_h11_event(self: Any, event: Any) -> None:
    """The replacement, bound as a method of hypercorn's H11Protocol (`self`)."""
    try:
        data = self.connection.send(event)
    except h11.LocalProtocolError:
        if self.connection.their_state != h11.ERROR:
            raise
        return
    held = self.__dict__.pop(_HEAD, None)
    if held is not None:
        data = held + data
    if isinstance(event, h11.Response) and _declares_body(event):
        self.__dict__[_HEAD] = data
        return
    if data:
        await self.send(RawData(data=data))


def _declares_body(response: h11.Response) -> bool:
    for name, value in response.headers:
        if name == b"content-length":
            return value != b"0"
    return False


def install() -> bool:
    """Patch hypercorn's HTTP/1.1 protocol (once per process); False if its shape is unknown."""
    try:
        from hypercorn.protocol.h11 import H11Protocol
    except ImportError:
        return False
    if getattr(H11Protocol, "_send_h11_event", None) is send_h11_event:
        return True
    if not hasattr(H11Protocol, "_send_h11_event"):
        log.warning("hypercorn has no _send_h11_event; responses keep separate writes")
        return False
    H11Protocol._send_h11_event = send_h11_event
    return True
