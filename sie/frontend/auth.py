"""Bearer-token authentication for every API route; probes (and, unless asked, /metrics) stay open.

A pure ASGI wrapper in front of Starlette, so a stranger's request costs one header comparison and
never reaches routing, body reading or a device. Tokens are compared in constant time, each one
in full, so neither the position of a mismatch nor which token matched shows in the timing.
"""

from __future__ import annotations

import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from sie.frontend.observe import note_error
from sie.frontend.render import render_error, render_openai_error

PROBES = frozenset({"/healthz", "/livez", "/readyz"})
_CHALLENGE = (b"www-authenticate", b"Bearer")


def is_valid_token(presented: bytes, tokens: list[bytes]) -> bool:
    matched = False
    for token in tokens:  # no early exit: every token is compared, whatever matched
        matched |= hmac.compare_digest(presented, token)
    return matched


class BearerAuth:
    def __init__(self, app: ASGIApp, tokens: list[str], *, protect_metrics: bool = False) -> None:
        if not tokens:
            raise ValueError("BearerAuth needs at least one token")
        self.app = app
        self.tokens = [t.encode() for t in tokens]
        self.open_paths = PROBES if protect_metrics else PROBES | {"/metrics"}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await self._refuse(scope, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credentials = value.partition(b" ")
                return scheme.lower() == b"bearer" and is_valid_token(credentials.strip(), self.tokens)
        return False

    async def _refuse(self, scope: Scope, send: Send) -> None:
        note_error("UNAUTHORIZED")
        message = "Missing or invalid bearer token (send 'Authorization: Bearer <token>')"
        if scope["path"].startswith("/v1/embeddings"):  # OpenAI clients read OpenAI's error shape
            body = render_openai_error(message, "invalid_request_error", None, "invalid_api_key")
        else:
            body = render_error("UNAUTHORIZED", message)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            _CHALLENGE,
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})
