"""Processes die under a running server: pending requests fail fast, restarts happen, serving goes on."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.integration.reference import MINILM, minilm_dir, reference_embeddings
from tests.integration.server import Server, cpu_seconds, wait_until
from tests.integration.texts import assert_close, random_texts
from tests.integration.wire import decode, dense_matrix, encode

pytestmark = pytest.mark.slow

PROBE_TEXTS = ["Hello", "A man is eating food.", "protein cell gene", "the risk of mice"]


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


@dataclass
class Stale:
    dead: list[Path]
    live: list[Path]


@pytest.fixture(scope="module")
def stale() -> Iterator[Stale]:
    """Leftovers of a SIGKILLed server (dead supervisor pid), and look-alikes of a live one."""
    instance = f"stale{os.getpid()}"
    pid = dead_pid()
    made = Stale(
        dead=[Path(f"/dev/shm/sie.{instance}.{pid}.x"), Path(f"/dev/shm/sem.sie.{instance}.{pid}.y")],
        live=[
            Path(f"/dev/shm/sie.{instance}.{os.getpid()}.x"),
            Path(f"/dev/shm/sem.sie.{instance}.{os.getpid()}.y"),
        ],
    )
    for path in [*made.dead, *made.live]:
        path.write_bytes(b"left behind")
    yield made
    for path in [*made.dead, *made.live]:
        path.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def server(stale: Stale) -> Iterator[Server]:
    started = Server(frontends=2).wait_ready()
    yield started
    assert started.stop() == 0, started.log()


@pytest.fixture(scope="module")
def probe_reference() -> np.ndarray:
    return reference_embeddings(PROBE_TEXTS, minilm_dir())


def test_stale_shared_memory_of_dead_servers_is_swept_at_start(server: Server, stale: Stale) -> None:
    assert [p for p in stale.dead if p.exists()] == []
    assert all(p.exists() for p in stale.live)
    assert server.roles()["device"]  # the server really started after making them


def healthy(server: Server) -> None:
    wait_until(lambda: _ready(server), 90, "/readyz is 200")
    roles = server.roles()
    assert len(roles["device"]) == 1 and len(roles["frontend"]) == 2, roles


def _ready(server: Server) -> bool:
    try:
        return httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@dataclass
class Outcome:
    sent_s: float
    done_s: float = 0.0
    response: httpx.Response | None = None
    error: Exception | None = None


def test_device_killed_with_requests_in_flight(server: Server, probe_reference: np.ndarray) -> None:
    healthy(server)
    (device,) = server.roles()["device"]
    body = {"items": [{"text": t} for t in random_texts(64, 180, seed=11)]}
    outcomes = [Outcome(0.0) for _ in range(4)]

    def send(outcome: Outcome) -> None:
        outcome.sent_s = time.monotonic()
        try:
            outcome.response = encode(server.url, MINILM, body, as_json=False, timeout=60)
        except Exception as exc:
            outcome.error = exc
        outcome.done_s = time.monotonic()

    busy_before = cpu_seconds(device)
    threads = [threading.Thread(target=send, args=(o,), daemon=True) for o in outcomes]
    for thread in threads:
        thread.start()
    # In flight means the device is computing on them: its CPU time grows.
    wait_until(lambda: cpu_seconds(device) > busy_before + 0.5, 60, "device busy with the big requests")
    assert not any(o.done_s for o in outcomes), "a request finished before the kill; make them bigger"
    os.kill(device, signal.SIGKILL)
    killed_s = time.monotonic()
    for thread in threads:
        thread.join(10)
        assert not thread.is_alive(), "a request pending on the killed device hangs"
    for outcome in outcomes:
        assert outcome.error is None, outcome.error
        response = outcome.response
        assert response is not None
        assert response.status_code == 503, response.text
        assert response.json()["detail"]["code"] == "DEVICE_UNAVAILABLE"
        assert response.headers["retry-after"] == "1"
        assert outcome.done_s - killed_s <= 2.0, outcome.done_s - killed_s

    # Until the restarted device has reloaded the model, new requests are refused with a retry hint.
    refusals: list[httpx.Response] = []

    def served() -> httpx.Response | None:
        response = encode(server.url, MINILM, {"items": [{"text": t} for t in PROBE_TEXTS]}, as_json=False)
        if response.status_code == 200:
            return response
        refusals.append(response)
        return None

    response = wait_until(served, 90, "requests succeed after the device restart", interval_s=0.1)
    assert refusals, "the first request after the kill was served by a device that cannot be back yet"
    for refusal in refusals:
        assert refusal.status_code == 503, refusal.text
        code = refusal.json()["detail"]["code"]
        assert code in ("DEVICE_UNAVAILABLE", "MODEL_LOADING"), code
        assert refusal.headers["retry-after"] == ("1" if code == "DEVICE_UNAVAILABLE" else "5")
    assert_close(dense_matrix(decode(response)), probe_reference)
    healthy(server)
    (restarted,) = server.roles()["device"]
    assert restarted != device
    again = encode(server.url, MINILM, {"items": body["items"][:16]}, as_json=False, timeout=90)
    assert again.status_code == 200 and len(decode(again)["items"]) == 16


def test_frontend_killed_other_keeps_serving(server: Server, probe_reference: np.ndarray) -> None:
    healthy(server)
    before = server.roles()["frontend"]
    stop = threading.Event()
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def send(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            index = rng.randrange(len(PROBE_TEXTS))
            outcome = Outcome(time.monotonic())
            try:
                # A fresh connection each time (no pool), so a retry lands on a live frontend.
                outcome.response = httpx.post(
                    f"{server.url}/v1/encode/{MINILM}",
                    json={"items": [{"id": str(index), "text": PROBE_TEXTS[index]}]},
                    headers={"accept": "application/json"},
                    timeout=30,
                )
            except httpx.TransportError as exc:
                outcome.error = exc
            outcome.done_s = time.monotonic()
            with lock:
                outcomes.append(outcome)

    def successes(after_s: float) -> int:
        with lock:
            return sum(1 for o in outcomes if o.sent_s > after_s and o.response is not None)

    threads = [threading.Thread(target=send, args=(seed,), daemon=True) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: successes(0.0) >= 10, 30, "load is flowing")
        os.kill(before[0], signal.SIGKILL)
        killed_s = time.monotonic()
        new = wait_until(
            lambda: [p for p in server.roles()["frontend"] if p not in before], 30, "a new frontend process"
        )
        restarted_s = time.monotonic()
        assert before[1] in server.roles()["frontend"]
        wait_until(lambda: successes(killed_s) >= 10, 30, "the surviving frontend serves")
        wait_until(lambda: successes(restarted_s) >= 20, 30, "serving goes on after the restart")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert len(new) == 1
    failures = [o for o in outcomes if o.error is not None]
    # Only requests on connections the killed frontend had already accepted may fail, and only
    # with a connection error; one such request per sending thread at most.
    assert len(failures) <= len(threads), failures
    for failure in failures:
        # Sent before the kernel had torn the dead process's connections down: a few ms, more on a
        # loaded box; a request routed to the dead frontend later would fail seconds after.
        assert failure.sent_s <= killed_s + 0.25, failure.sent_s - killed_s
    for outcome in outcomes:
        if outcome.response is None:
            continue
        assert outcome.response.status_code == 200, outcome.response.text
        item = outcome.response.json()["items"][0]
        want = probe_reference[int(item["id"])]
        assert_close(np.asarray([item["dense"]["values"]], np.float32), want[None])
    healthy(server)
