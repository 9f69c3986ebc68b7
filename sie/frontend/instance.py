"""`X-SIE-Instance`: which server answered, on every response, errors included.

Behind a balancer this is how a client, a test or an operator tells the servers apart (HAProxy's
own `X-SIE-Backend` names the balancer's view; this one is the server's). The outermost middleware
(`sie.frontend.observe.RequestObserver`) adds it, so the 500s Starlette's ServerErrorMiddleware
sends carry it too.
"""

from __future__ import annotations

import socket

HEADER = b"x-sie-instance"


def instance_id(instance: str, hostname: str | None = None) -> str:
    """`<instance>@<host>`: unique across boxes even where every server keeps the default name."""
    return f"{instance}@{hostname or socket.gethostname()}"
