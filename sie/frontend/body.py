"""Reading a request body within the configured limit, before any of it is parsed."""

from __future__ import annotations

from starlette.requests import Request

from sie.errors import InputTooLong, InvalidInput


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise InvalidInput("Content-Length is not a number")
        if int(declared) > limit:
            raise InputTooLong(f"Request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:  # chunked uploads carry no Content-Length
            raise InputTooLong(f"Request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
