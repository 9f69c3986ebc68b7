"""Connections spread over the frontends: a burst that landed on one frontend drifts to the idle one,
and the listening socket keeps the backlog sie asked for (hypercorn listens on it again)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.server import Server, metric_sum

pytestmark = pytest.mark.slow

CLIENTS = 8
LOAD_S = 3.0
BODY = json.dumps({"items": [{"text": "a short sentence to embed"}]})


def connections_per_frontend(server: Server) -> dict[int, int]:
    counts = {}
    for pid in server.roles()["frontend"]:
        held = psutil.Process(pid).net_connections(kind="tcp")
        counts[pid] = sum(c.status == "ESTABLISHED" and c.laddr.port == server.port for c in held)
    return counts


def load(port: int, stop: threading.Event, closes: list[int], held: list[http.client.HTTPConnection]) -> None:
    """One keep-alive client: http.client reconnects by itself after a `connection: close`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while True:
        conn.request("POST", "/v1/encode/sie-fake", BODY, {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        closed = response.getheader("connection") == "close"
        closes.extend([1] if closed else [])
        if stop.is_set() and not closed:
            break
    held.append(conn)  # still open and served, so the count after the load sees where it ended


def wait_for_counts(server: Server, expected: dict[int, int], timeout_s: float = 2.0) -> dict[int, int]:
    """The counts once they match, or the last seen: a client may be between a close and its
    reconnect (still in the accept queue, owned by no frontend) at any one instant."""
    deadline = time.monotonic() + timeout_s
    while (counts := connections_per_frontend(server)) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return counts


def crowd_one_frontend_then_load(server: Server) -> tuple[int, dict[int, int], int]:
    """The clients connect while the second frontend is stopped, so the first accepts them all."""
    first, second = server.roles()["frontend"]
    closes: list[int] = []
    held: list[http.client.HTTPConnection] = []
    stop = threading.Event()
    threads = [threading.Thread(target=load, args=(server.port, stop, closes, held)) for _ in range(CLIENTS)]
    os.kill(second, signal.SIGSTOP)
    try:
        for thread in threads:
            thread.start()
        assert wait_for_counts(server, {first: CLIENTS, second: 0}) == {first: CLIENTS, second: 0}
        os.kill(second, signal.SIGCONT)
        time.sleep(LOAD_S)
    finally:
        os.kill(second, signal.SIGCONT)
        stop.set()
        for thread in threads:
            thread.join()
    counts = connections_per_frontend(server)
    for conn in held:
        conn.close()
    assert len(held) == CLIENTS  # every client ran to the end
    return second, counts, len(closes)


def serve_fake(rebalance: bool) -> Server:
    return Server(
        "--models", "sie-fake", "--preload", "sie-fake",
        "--max-batch-wait-ms", "20",  # each request stays in flight a while: steady gauges
        env={"SIE_REBALANCE_CONNECTIONS": "true" if rebalance else "false"},
    ).wait_ready()  # fmt: skip


def test_a_crowded_frontend_hands_clients_to_the_idle_one() -> None:
    server = serve_fake(rebalance=True)
    try:
        second, counts, closes = crowd_one_frontend_then_load(server)
        assert closes >= 1
        assert counts[second] >= 2, (counts, closes)  # fair share: 4 of 8
        assert sum(counts.values()) == CLIENTS
        assert metric_sum(server, "sie_connection_rebalances_total") == closes  # as the clients saw them
    finally:
        server.stop()


def test_without_rebalancing_the_burst_stays_where_it_landed() -> None:
    server = serve_fake(rebalance=False)
    try:
        second, counts, closes = crowd_one_frontend_then_load(server)
        assert closes == 0
        assert counts[second] == 0, counts
        assert metric_sum(server, "sie_connection_rebalances_total") == 0
    finally:
        server.stop()


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_the_listening_socket_keeps_the_backlog_asked_for() -> None:
    server = Server("--models", "sie-fake", "--preload", "sie-fake", "--listen-backlog", "777").wait_ready()
    try:
        listing = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True)
        state, _recv_q, send_q, *_ = listing.stdout.split()
        assert state == "LISTEN"
        somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
        assert int(send_q) == min(777, somaxconn)
    finally:
        server.stop()
