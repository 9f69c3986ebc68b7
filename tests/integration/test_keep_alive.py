"""Keep-alive connections and answers given before a request's body was read (a 404 for an
unknown model, a 401): the real server (hypercorn) over raw sockets.

hypercorn keeps a connection only if the request's body was all in when the app returned. HTTP
clients write a request's headers and its body separately, so an early answer raced the body; the
losing connection was closed without a `connection: close`, and the client's next request on it
failed (the real SDK saw httpx's RemoteProtocolError). Now the answer waits briefly for the body
and keeps the connection, or says `connection: close` when the body does not come."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest

from tests.integration.server import Server

pytestmark = pytest.mark.slow

BODY = b'{"items": [{"text": "x"}]}'


def connect(server: Server) -> socket.socket:
    url = urlsplit(server.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str]]:
    """The status and headers of one response, its body read off the socket by Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside a response body"
        rest += chunk
    return int(lines[0].split()[1]), headers


def post_headers(length: int) -> bytes:
    return (
        "POST /v1/encode/no-such/model HTTP/1.1\r\nhost: sie\r\ncontent-type: application/json\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode()


def test_an_answer_before_the_body_keeps_the_connection(minilm_server: Server) -> None:
    with connect(minilm_server) as sock:
        for _ in range(3):
            sock.sendall(post_headers(len(BODY)))
            time.sleep(0.01)  # the body a moment later, as a client's second write
            sock.sendall(BODY)
            status, headers = read_response(sock)
            assert status == 404 and headers.get("connection") != "close", headers
        sock.sendall(b"GET /v1/models/no-such/model HTTP/1.1\r\nhost: sie\r\n\r\n")
        assert read_response(sock)[0] == 404  # the same connection still serves


def test_an_answer_to_a_body_that_never_comes_says_close(minilm_server: Server) -> None:
    with connect(minilm_server) as sock:
        sock.sendall(post_headers(1000))  # and never the body
        status, headers = read_response(sock)
        assert (status, headers.get("connection")) == (404, "close"), headers
        sock.settimeout(5)
        assert sock.recv(1) == b""  # then the server closes, as it said
