"""Soak: long mixed traffic at ~70 % of measured capacity; memory must stay flat, errors zero.

    python scripts/soak.py [--url URL | --frontends N] [--duration-s 1800] [--load 0.7]

Measures the server's capacity on the request mix first (closed loop, `--clients` callers), then
offers `--load` of it, open loop, for `--duration-s`: dense and sparse `/v1/encode`, OpenAI
`/v1/embeddings`, PII `/v1/extract` and `/v1/models`, on the built-in models. Every `--sample-s` it
scrapes `/metrics` (as Prometheus would) and records the private (anonymous) memory of every
server process, as the least of five readings 0.2 s apart (a batch in flight at one instant is not
growth; a leak raises that floor too). After the warm-up (`--warmup-s`, default a tenth of the
run) each process's memory may grow by less than `--max-growth` (5 %), and no request may fail.
Without `--url` the script starts `python -m sie serve` itself and stops it at the end. The last
line of output is one JSON object; the exit status is 1 when a criterion fails. Not part of the
test suite (it runs for half an hour).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from _server import start_server, stop_server  # scripts/ is on sys.path when run as a script
from prometheus_client.parser import text_string_to_metric_families

DENSE = "sentence-transformers/all-MiniLM-L6-v2"
SPARSE = "sie/splade-tiny"
PII = "nationaldesignstudio/rampart"
WORDS = [
    "protein",
    "cell",
    "gene",
    "cancer",
    "patients",
    "study",
    "results",
    "treatment",
    "risk",
    "mice",
    "human",
    "expression",
]
NAMES = ["Ann Lee", "Bob Stone", "Carla Diaz", "Dev Patel"]
# Growth is judged on private memory: RSS also counts the rings' shared pages, which grow as the
# rings wrap the first time (up to their fixed size) and would read as a leak for a while.
ANONYMOUS = "sie_process_anonymous_memory_bytes"
RESIDENT = "sie_process_resident_memory_bytes"
FLOOR_READINGS = 5  # per memory sample, FLOOR_GAP_S apart; the least is kept
FLOOR_GAP_S = 0.2


def text(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))


def request_of(rng: random.Random) -> tuple[str, str, dict[str, Any] | None]:
    """(method, path, JSON body) of one request of the mix."""
    kind = rng.choices(["dense", "sparse", "openai", "extract", "models"], weights=[4, 2, 2, 1, 1])[0]
    items = [{"text": text(rng)} for _ in range(rng.randint(1, 4))]
    if kind == "dense":
        return "POST", f"/v1/encode/{DENSE}", {"items": items}
    if kind == "sparse":
        return "POST", f"/v1/encode/{SPARSE}", {"items": items, "params": {"output_types": ["sparse"]}}
    if kind == "openai":
        return "POST", "/v1/embeddings", {"model": DENSE, "input": [i["text"] for i in items]}
    if kind == "extract":
        note = f"Please call {rng.choice(NAMES)} at 555-{rng.randint(1000, 9999)} about the {text(rng)}"
        return "POST", f"/v1/extract/{PII}", {"items": [{"text": note}]}
    return "GET", "/v1/models", None


@dataclass
class Tally:
    statuses: Counter[str] = field(default_factory=Counter)
    latencies_s: list[float] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "200")


async def send(client: httpx.AsyncClient, url: str, rng: random.Random, tally: Tally) -> None:
    method, path, body = request_of(rng)
    started = time.monotonic()
    try:
        response = await client.request(method, url + path, json=body, headers={"accept": "application/json"})
        status = str(response.status_code)
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    tally.statuses[status] += 1
    tally.latencies_s.append(time.monotonic() - started)


async def capacity(url: str, clients: int, seconds: float) -> float:
    tally, deadline = Tally(), time.monotonic() + seconds

    async def caller(seed: int) -> None:
        rng = random.Random(seed)
        async with httpx.AsyncClient(timeout=120) as client:
            while time.monotonic() < deadline:
                await send(client, url, rng, tally)

    started = time.monotonic()
    await asyncio.gather(*(caller(k) for k in range(clients)))
    if tally.errors:
        raise SystemExit(f"errors while measuring capacity: {dict(tally.statuses)}")
    return len(tally.latencies_s) / (time.monotonic() - started)


async def memory(client: httpx.AsyncClient, url: str, metric: str = ANONYMOUS) -> dict[str, float]:
    """Bytes per server process ("device0", "frontend1", ...) of a /metrics memory gauge."""
    text_ = (await client.get(url + "/metrics")).text
    return {
        f"{s.labels['role']}{s.labels['index']}": s.value
        for family in text_string_to_metric_families(text_)
        for s in family.samples
        if s.name == metric
    }


async def floor_memory(
    client: httpx.AsyncClient, url: str, readings: int = FLOOR_READINGS, gap_s: float = FLOOR_GAP_S
) -> dict[str, float]:
    """Per process, the least of a few readings: memory a batch holds only while it runs is not
    growth, and a leak raises the floor too."""
    floor: dict[str, float] = {}
    for i in range(readings):
        if i:
            await asyncio.sleep(gap_s)
        for name, value in (await memory(client, url)).items():
            floor[name] = min(value, floor.get(name, value))
    return floor


async def sample_every(
    client: httpx.AsyncClient, url: str, sample_s: float, samples: list[dict[str, float]]
) -> None:
    while True:
        samples.append(await floor_memory(client, url))
        await asyncio.sleep(sample_s)


async def soak(
    url: str, rate: float, seconds: float, sample_s: float
) -> tuple[Tally, list[dict[str, float]], dict[str, float]]:
    tally, samples, rng = Tally(), [], random.Random(12345)
    limits = httpx.Limits(max_connections=500, max_keepalive_connections=100)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        in_flight: set[asyncio.Task[None]] = set()
        started = time.monotonic()
        sampler = asyncio.ensure_future(sample_every(client, url, sample_s, samples))
        n = 0
        while time.monotonic() - started < seconds:
            task = asyncio.ensure_future(send(client, url, rng, tally))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            n += 1
            await asyncio.sleep(max(0.0, started + n / rate - time.monotonic()))
        sampler.cancel()
        await asyncio.gather(*in_flight)
        samples.append(await floor_memory(client, url))
        resident = await memory(client, url, RESIDENT)
    return tally, samples, resident


def growth(samples: list[dict[str, float]], warmup_samples: int) -> dict[str, float]:
    """Per process: median of the last three samples over median of the first three after warm-up."""
    after = samples[warmup_samples:]
    result = {}
    for name in after[0]:
        series = [s[name] for s in after if name in s]
        first, last = statistics.median(series[:3]), statistics.median(series[-3:])
        result[name] = round(last / first - 1, 4)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="an already running server (default: start one)")
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument("--duration-s", type=float, default=1800.0)
    parser.add_argument("--warmup-s", type=float, help="default: a tenth of the duration")
    parser.add_argument("--load", type=float, default=0.7, help="share of the measured capacity to offer")
    parser.add_argument("--clients", type=int, default=8, help="callers while measuring capacity")
    parser.add_argument("--measure-s", type=float, default=20.0)
    parser.add_argument("--sample-s", type=float, default=10.0)
    parser.add_argument("--max-growth", type=float, default=0.05)
    args = parser.parse_args(argv)
    process = None
    url = args.url
    if url is None:
        process, url, _, _ = start_server(args.frontends, ["--preload", f"{DENSE},{SPARSE},{PII}"], "soak")
    try:
        rate = args.load * asyncio.run(capacity(url, args.clients, args.measure_s))
        print(f"capacity {rate / args.load:.1f} req/s; offering {rate:.1f} req/s for {args.duration_s:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
        tally, samples, resident = asyncio.run(soak(url, rate, args.duration_s, args.sample_s))
    finally:
        if process is not None:
            stop_server(process)
    warmup_s = args.warmup_s if args.warmup_s is not None else args.duration_s / 10
    grown = growth(samples, max(1, int(warmup_s / args.sample_s)))
    latencies = sorted(tally.latencies_s)
    result = {
        "duration_s": args.duration_s,
        "offered_per_s": round(rate, 2),
        "capacity_per_s": round(rate / args.load, 2),
        "requests": len(latencies),
        "statuses": dict(tally.statuses),
        "errors": tally.errors,
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 1),
        "private_growth_after_warmup": grown,
        "private_mib_end": {k: round(v / 2**20, 1) for k, v in samples[-1].items()},
        "rss_mib_end": {k: round(v / 2**20, 1) for k, v in resident.items()},
        # Every sixth sample (a minute apart at the default --sample-s), to see a plateau or a slope.
        "private_mib_series": {
            k: [round(s[k] / 2**20, 1) for s in samples[::6] if k in s] for k in samples[-1]
        },
        "passed": tally.errors == 0 and all(g < args.max_growth for g in grown.values()),
    }
    print(json.dumps(result))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
