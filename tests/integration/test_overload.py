"""Four times more requests than the device can serve, and a client that gives up mid-queue.

The device here is the real MiniLM on one torch thread, so it, not HTTP, is the bottleneck: the
test measures its capacity, offers four times that for OVERLOAD_S (the issue's soak asks 60 s; 20 s
shows the same steady state and keeps CI short), and checks what a client, a balancer and the box
see: fast 503 QUEUE_FULL with Retry-After for the excess, bounded latency for the rest, /readyz 200
throughout, flat memory in every process, and the same throughput afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sie.catalog import BUILTIN_MODELS_DIR
from sie.frontend.hostinfo import process_usage
from sie.settings import load_settings
from tests.integration.reference import MINILM
from tests.integration.server import Server, metric_sum, wait_until
from tests.integration.texts import random_texts

pytestmark = pytest.mark.slow

QUEUE_ITEMS = 48  # --max-concurrent-requests: items queued per model before 503 QUEUE_FULL
ITEMS = 8  # per request: six requests fill the queue
VICTIM = "test/minilm-victim"  # MiniLM under another id: its items queue apart from the blocker's
MINILM_YAML = "sentence-transformers__all-MiniLM-L6-v2.yaml"
OVERLOAD_S = 20.0
MEASURE_S = 5.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """MiniLM, and the same weights under a second id, whose queue depth is the victim's alone."""
    models = tmp_path_factory.mktemp("overload")
    description = yaml.safe_load((BUILTIN_MODELS_DIR / MINILM_YAML).read_text())
    (models / MINILM_YAML).write_text(yaml.safe_dump(description))
    (models / "victim.yaml").write_text(yaml.safe_dump({**description, "sie_id": VICTIM}))
    started = Server(
        "--models-dir",
        str(models),
        "--preload",
        f"{MINILM},{VICTIM}",
        "--max-concurrent-requests",
        str(QUEUE_ITEMS),
        frontends=1,
    ).wait_ready()
    yield started
    assert started.stop() == 0, started.log()


def body(seed: int, items: int = ITEMS, words: int = 40) -> dict[str, object]:
    return {"items": [{"text": t} for t in random_texts(items, words, seed=seed, numbered=True)]}


@dataclass
class Outcome:
    status: int
    seconds: float  # as the client saw it
    code: str | None = None
    retry_after: str | None = None
    server_s: dict[str, float] = field(default_factory=dict)  # x-queue-time etc., in seconds


async def call(client: httpx.AsyncClient, url: str, seed: int) -> Outcome:
    started = time.monotonic()
    response = await client.post(url, json=body(seed), headers={"accept": "application/json"})
    seconds = time.monotonic() - started
    if response.status_code != 200:
        code = response.json()["detail"]["code"]
        return Outcome(response.status_code, seconds, code, response.headers.get("retry-after"))
    stages = {k: float(response.headers[f"x-{k}-time"]) / 1000 for k in ("queue", "inference", "total")}
    return Outcome(200, seconds, server_s=stages)


async def closed_loop(url: str, clients: int, seconds: float) -> float:
    """Requests per second with `clients` callers that each wait for their answer."""
    done = 0
    deadline = time.monotonic() + seconds

    async def caller(k: int) -> None:
        nonlocal done
        async with httpx.AsyncClient(timeout=60) as client:
            seed = k * 100_000
            while time.monotonic() < deadline:
                outcome = await call(client, url, seed)
                assert outcome.status == 200, outcome
                done += 1
                seed += 1

    started = time.monotonic()
    await asyncio.gather(*(caller(k) for k in range(clients)))
    return done / (time.monotonic() - started)


async def open_loop(url: str, rate: float, seconds: float) -> list[Outcome]:
    """Arrivals at `rate` per second whatever the answers do: the excess must be turned away."""
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        tasks = []
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < seconds:
            tasks.append(asyncio.ensure_future(call(client, url, 10_000_000 + n)))
            n += 1
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
        return list(await asyncio.gather(*tasks))


@dataclass
class Watch:
    """/readyz every 250 ms and the private memory of every server process every second, until
    stopped (RSS also counts ring pages, which grow as the rings first wrap, up to their size)."""

    server: Server
    ready: list[int] = field(default_factory=list)
    private: dict[int, list[int]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        roles = self.server.roles()
        pids = [self.server.process.pid, *roles["device"], *roles["frontend"]]
        ticks = 0
        while not self.stop.wait(0.25):
            self.ready.append(httpx.get(f"{self.server.url}/readyz", timeout=10).status_code)
            ticks += 1
            if ticks % 4 == 0:
                for pid in pids:
                    usage = process_usage(pid)
                    assert usage is not None, f"server process {pid} is gone"
                    self.private.setdefault(pid, []).append(usage.anonymous_bytes)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def queue_full_total(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "sie_queue_full_total" and s.labels["model"] == MINILM
    )


def test_four_times_capacity(server: Server) -> None:
    url = f"{server.url}/v1/encode/{MINILM}"
    capacity = asyncio.run(closed_loop(url, clients=4, seconds=MEASURE_S))
    rejected_before = queue_full_total(server)
    watch = Watch(server)
    watcher = threading.Thread(target=watch.run, daemon=True)
    watcher.start()
    outcomes = asyncio.run(open_loop(url, rate=4 * capacity, seconds=OVERLOAD_S))
    watch.stop.set()
    watcher.join(30)
    after = asyncio.run(closed_loop(url, clients=4, seconds=MEASURE_S))

    accepted = [o for o in outcomes if o.status == 200]
    refused = [o for o in outcomes if o.status != 200]
    report = f"capacity {capacity:.1f}/s, after {after:.1f}/s, {len(accepted)} ok, {len(refused)} refused"
    assert {(o.status, o.code, o.retry_after) for o in refused} <= {(503, "QUEUE_FULL", "1")}, report
    assert len(refused) >= len(outcomes) / 2, report  # three quarters of the offer cannot be served
    assert queue_full_total(server) - rejected_before == len(refused)
    refusal_s = [o.seconds for o in refused]
    accepted_s = [o.seconds for o in accepted]
    print(  # the README's figures (pytest -s)
        f"overload: {report}; refusal p50 {percentile(refusal_s, 50) * 1000:.1f} ms, "
        f"p99 {percentile(refusal_s, 99) * 1000:.1f} ms; accepted p50 "
        f"{percentile(accepted_s, 50):.2f} s, p99 {percentile(accepted_s, 99):.2f} s"
    )
    # A refusal does not wait for the device: as the client sees it, the typical one takes a small
    # part of the typical accepted request's time. Both are timed by this process's client, which
    # shares the box's two cores with the server, so they are compared with each other rather than
    # with fixed seconds, and the client-side tail (its own scheduling, new connections) is printed only.
    assert percentile(refusal_s, 50) < 0.25 * percentile(accepted_s, 50), (report, refusal_s)
    # Bounded by the queue cap: every queued item fits the next batch (QUEUE_ITEMS <= the batch
    # cap), so an accepted request waits for at most the batch running when it arrived, then runs
    # in its own. Neighbours on this shared box make one batch take 0.6-2.3 s from run to run, so
    # the bound is in units of the slowest batch of this very run, not in fixed seconds.
    batch_s = max(o.server_s["inference"] for o in accepted)
    for outcome in accepted:
        assert outcome.server_s["queue"] <= 1.25 * batch_s + 0.25, (report, outcome, batch_s)
        assert outcome.server_s["total"] <= 2.5 * batch_s + 0.5, (report, outcome, batch_s)
    assert watch.ready and set(watch.ready) == {200}, watch.ready  # overload is not unreadiness
    for pid, samples in watch.private.items():
        # The device's memory swings by 50 MB or more with each batch's shape, so one sample can
        # land in a trough: the second quarter's peak is the baseline the second half's peak is
        # held to (growth, not the swing, is what fails).
        quarter = len(samples) // 4
        warm = max(samples[quarter : 2 * quarter])
        assert max(samples[2 * quarter :]) - warm < 64 << 20, (pid, samples)
    # Nothing is left behind, and serving goes on. (Throughput is compared loosely: the neighbours
    # on this box move it by tens of percent between two five-second runs.)
    assert metric_sum(server, "sie_pending_items") == metric_sum(server, "sie_result_overflow_messages") == 0
    assert metric_sum(server, "sie_requests_in_flight") == 0
    assert after >= 0.5 * capacity, report


def test_a_client_that_leaves_is_not_computed(server: Server) -> None:
    cancelled = metric_sum(server, "sie_cancelled_items_total", model=VICTIM)
    computed = metric_sum(server, "sie_batch_size_sum", model=MINILM)
    victim_computed = metric_sum(server, "sie_batch_size_sum", model=VICTIM)
    left = metric_sum(server, "sie_client_disconnects_total", model=VICTIM)
    blocker_body = body(seed=1, items=QUEUE_ITEMS - ITEMS, words=120)  # keeps the device busy a while
    blocker = threading.Thread(
        target=lambda: httpx.post(f"{server.url}/v1/encode/{MINILM}", json=blocker_body, timeout=120)
    )
    blocker.start()
    # Its items queued on the device, not only its request in the frontend: else the victim's items
    # can reach the device first and run before the client leaves. The device takes the group whose
    # oldest item is oldest, so the blocker's batches all run before the victim's.
    wait_until(
        lambda: metric_sum(server, "sie_pending_items", model=MINILM) >= ITEMS, 30, "the blocker is queued"
    )
    payload = json.dumps(body(seed=2)).encode()
    victim = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    victim.sendall(
        f"POST /v1/encode/{VICTIM} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    wait_until(lambda: metric_sum(server, "sie_pending_items", model=VICTIM) == ITEMS, 30, "victim queued")
    victim.close()  # the client gives up while its items wait behind the blocker
    blocker.join(120)
    wait_until(
        lambda: metric_sum(server, "sie_cancelled_items_total", model=VICTIM) - cancelled == ITEMS,
        30,
        "the victim's items are dropped",
    )
    assert metric_sum(server, "sie_batch_size_sum", model=MINILM) - computed == QUEUE_ITEMS - ITEMS
    assert metric_sum(server, "sie_batch_size_sum", model=VICTIM) == victim_computed  # none of its items
    assert metric_sum(server, "sie_client_disconnects_total", model=VICTIM) - left == 1


def test_the_frontends_yield_the_cores_to_the_device(server: Server) -> None:
    # When the cores are short (refusals pouring out under overload), the device's batches go first.
    roles = server.roles()
    device = {os.getpriority(os.PRIO_PROCESS, pid) for pid in roles["device"]}
    frontends = {os.getpriority(os.PRIO_PROCESS, pid) for pid in roles["frontend"]}
    assert len(device) == 1 and roles["frontend"], roles
    step = load_settings({}, os.environ).frontend_nice  # 5 unless SIE_FRONTEND_NICE says otherwise
    assert frontends == {min(19, device.pop() + step)}
