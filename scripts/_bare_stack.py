"""The HTTP stack alone, as a ceiling for `bench_overhead.py`: Starlette on hypercorn, one POST route
that decodes the body with msgspec, tokenizes its texts and answers a fixed JSON body.

    python scripts/_bare_stack.py TOKENIZER_JSON  (served by: hypercorn scripts._bare_stack:app)
"""

from __future__ import annotations

import os

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from tokenizers import Tokenizer


class Item(msgspec.Struct):
    text: str = ""


class Body(msgspec.Struct):
    items: list[Item]


_DECODER = msgspec.json.Decoder(Body)
_TOKENIZER = Tokenizer.from_file(os.environ["BARE_STACK_TOKENIZER"])
_TOKENIZER.no_padding()
_TOKENIZER.enable_truncation(256)
_REPLY = msgspec.json.encode({"model": "bare", "items": [{"dense": {"dims": 2, "values": [0.0, 1.0]}}]})


async def encode(request: Request) -> Response:
    body = _DECODER.decode(await request.body())
    _TOKENIZER.encode_batch_fast([item.text for item in body.items])
    return Response(_REPLY, media_type="application/json")


app = Starlette(routes=[Route("/v1/encode/{model:path}", encode, methods=["POST"])])
