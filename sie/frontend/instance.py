"""`X-SIE-Instance`: which server answered, on every response, errors included.

Behind a balancer this is how a client, a test or an operator tells the servers apart (HAProxy's
own `X-SIE-Backend` names the balancer's view; this one is the server's). It is a pure ASGI
wrapper so that it also sees the 500s Starlette's outermost ServerErrorMiddleware sends.
"""

from __future__ import annotations

import socket

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-sie-instance"


def instance_id(instance: str, hostname: str | None = None) -> str:
    """`<instance>@<host>`: unique across boxes even where every server keeps the default name."""
    return f"{instance}@{hostname or socket.gethostname()}"


class InstanceHeader:
    def __init__(self, app: ASGIApp, value: str) -> None:
        self.app = app
        self.value = value.encode("latin-1", "replace")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (HEADER, self.value)]
            await send(message)

        await self.app(scope, receive, send_tagged)
