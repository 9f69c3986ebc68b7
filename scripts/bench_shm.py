"""Benchmark sie.shm on this machine: ring-pair round trips and 4-producer -> 1-consumer throughput.

    python scripts/bench_shm.py [--quick] [--client-wake bell|eventfd] [--pin]

Round trip: the client pushes N bytes into a request ring and rings the echo process's Doorbell;
the echo pops, pushes the same bytes into a response ring, releases, and wakes the client; the
client copies the response out. Throughput: 4 producer processes push 1-700 int32 tokens each
into their own ring and ring one shared Doorbell; the consumer verifies every byte. The last line
of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import posix_ipc

try:
    import sie.shm  # noqa: F401
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sie.shm import Doorbell, EventFd, Ring

SIZES = {"1k": 1 << 10, "64k": 64 << 10, "1m": 1 << 20}
TOKENS_MAX = 700
PRODUCERS = 4
WAIT_S = 1.0
_BASE = np.arange(TOKENS_MAX, dtype=np.int32) * 31


def _tokens(producer: int, seq: int) -> np.ndarray:
    n = 1 + (seq * 7919 + producer * 104729) % TOKENS_MAX
    return _BASE[:n] + np.int32((seq * 1000 + producer) & 0x7FFFFFFF)


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity") and cpu < (os.cpu_count() or 1):
        os.sched_setaffinity(0, {cpu})


def _spawn(*args: object, **kwargs: Any) -> subprocess.Popen[bytes]:
    argv = [sys.executable, __file__, *map(str, args)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, **kwargs)


def _expect_ready(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready or proc.stdout.readline() != b"ready\n":
        raise RuntimeError(f"child {proc.pid} did not start")


class _ClientWake:
    """How the echo wakes the client: a named Doorbell, or an eventfd the client blocks on."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.bell = Doorbell.create(name) if kind == "bell" else None
        self.efd = EventFd.create() if kind == "eventfd" else None
        self.poll = select.poll()
        if self.efd is not None:
            self.poll.register(self.efd.fd, select.POLLIN)

    def arg(self) -> str:
        return self.bell.name if self.bell is not None else f"fd:{self.efd.fd}"  # type: ignore[union-attr]

    def wait(self) -> None:
        if self.bell is not None:
            self.bell.wait(WAIT_S)
        else:
            self.poll.poll(WAIT_S * 1000)
            self.efd.clear()  # type: ignore[union-attr]

    def close(self) -> None:
        if self.bell is not None:
            self.bell.unlink()
            self.bell.close()
        if self.efd is not None:
            self.efd.close()


def echo_main(req_name: str, resp_name: str, bell_name: str, wake: str, cpu: str) -> None:
    _pin(int(cpu) if cpu != "-" else None)
    req, resp, bell = Ring.attach(req_name), Ring.attach(resp_name), Doorbell.attach(bell_name)
    ring_client = EventFd(int(wake[3:])).ring if wake.startswith("fd:") else Doorbell.attach(wake).ring
    print("ready", flush=True)
    while True:
        if not bell.wait(WAIT_S) and os.getppid() == 1:
            return
        while (message := req.try_pop()) is not None:
            if message.tag == 0:
                return
            while not resp.try_push(message.view, message.tag):
                time.sleep(0)
            req.release(message)
            ring_client()


def bench_rtt(prefix: str, wake_kind: str, pin: bool, iterations: dict[str, int]) -> dict[str, float]:
    req = Ring.create(prefix + ".req", slots=64, arena_bytes=4 << 20)
    resp = Ring.create(prefix + ".resp", slots=64, arena_bytes=4 << 20)
    bell = Doorbell.create(prefix + ".bell")
    wake = _ClientWake(wake_kind, prefix + ".cbell")
    pass_fds = [wake.efd.fd] if wake.efd is not None else []
    echo = _spawn("_echo", req.name, resp.name, bell.name, wake.arg(), 1 if pin else "-", pass_fds=pass_fds)
    results: dict[str, float] = {}
    try:
        _expect_ready(echo)
        _pin(0 if pin else None)
        for label, size in SIZES.items():
            rtts = _round_trips(req, resp, bell, wake, size, iterations[label])
            results[f"rtt_us_median_{label}"] = round(float(np.median(rtts)), 1)
            results[f"rtt_us_p99_{label}"] = round(float(np.percentile(rtts, 99)), 1)
            print(
                f"rtt {label:>4}: median {results[f'rtt_us_median_{label}']:8.1f} us  "
                f"p99 {results[f'rtt_us_p99_{label}']:8.1f} us  ({len(rtts)} round trips)",
                flush=True,
            )
        req.try_push(b"", 0)  # tag 0: stop
        bell.ring()
        echo.wait(timeout=10)
    finally:
        if pin:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        if echo.poll() is None:
            echo.kill()
        for ring in (req, resp):
            ring.unlink()
            ring.close()
        bell.unlink()
        bell.close()
        wake.close()
    return results


def _round_trips(req: Ring, resp: Ring, bell: Doorbell, wake: _ClientWake, size: int, n: int) -> np.ndarray:
    payload = np.frombuffer(os.urandom(size), np.uint8)
    out = np.empty(size, np.uint8)
    warmup = max(20, n // 10)
    rtts = np.empty(n, np.float64)
    clock = time.perf_counter_ns
    for i in range(-warmup, n):
        t0 = clock()
        if not req.try_push(payload, i + warmup + 1):
            raise RuntimeError("request ring full in a ping-pong")
        bell.ring()
        while (message := resp.try_pop()) is None:
            wake.wait()
        out[:] = message.view
        resp.release(message)
        t1 = clock()
        if i >= 0:
            rtts[i] = (t1 - t0) / 1e3
    if not np.array_equal(out, payload):
        raise RuntimeError("echo returned different bytes")
    return rtts


def produce_main(ring_name: str, bell_name: str, producer: str, count: str) -> None:
    p, n = int(producer), int(count)
    ring, bell = Ring.attach(ring_name), Doorbell.attach(bell_name)
    print("ready", flush=True)
    sys.stdin.read()  # EOF is the starting gun
    full = 0
    for seq in range(n):
        payload = _tokens(p, seq)
        while not ring.try_push(payload, seq):
            full += 1
            time.sleep(500e-6)  # a frontend would answer 503 + Retry-After here
        bell.ring()
    print(f"full {full}", flush=True)


def bench_throughput(prefix: str, per_producer: int, repeats: int) -> dict[str, object]:
    """Several short runs: on a shared 2-CPU VM one run says more about the neighbours than us."""
    runs = [_throughput_run(f"{prefix}.r{k}", per_producer) for k in range(repeats)]
    rates = sorted(run[0] for run in runs)
    return {
        "msgs_per_s_4to1": round(float(np.median(rates))),
        "msgs_per_s_4to1_best": round(rates[-1]),
        "msgs_per_s_4to1_runs": [round(run[0]) for run in runs],
        "consumer_cpu_us_per_msg_4to1": round(float(np.median([run[1] for run in runs])), 2),
        "wakeups_4to1": [run[2] for run in runs],
        "ring_full_4to1": [run[3] for run in runs],
    }


def _throughput_run(prefix: str, per_producer: int) -> tuple[float, float, int, int]:
    rings = [Ring.create(f"{prefix}.p{p}", slots=256, arena_bytes=1 << 20) for p in range(PRODUCERS)]
    bell = Doorbell.create(prefix + ".bell")
    procs = [
        _spawn("_produce", ring.name, bell.name, p, per_producer, stdin=subprocess.PIPE)
        for p, ring in enumerate(rings)
    ]
    try:
        for proc in procs:
            _expect_ready(proc)
        start, cpu_start = time.perf_counter(), time.process_time()
        for proc in procs:
            proc.stdin.close()  # type: ignore[union-attr]
        wakes = _consume(rings, bell, per_producer)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        fulls = [int(proc.stdout.readline().split()[1]) for proc in procs]  # type: ignore[union-attr]
        for proc in procs:
            proc.wait(timeout=30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for ring in rings:
            ring.unlink()
            ring.close()
        bell.unlink()
        bell.close()
    total = PRODUCERS * per_producer
    rate, cpu_us = total / elapsed, cpu / total * 1e6
    print(
        f"4->1: {total} messages in {elapsed:.2f} s = {rate:,.0f} msg/s, consumer CPU {cpu_us:.2f} us/msg, "
        f"{wakes} doorbell wakeups, ring-full retries per producer {fulls}",
        flush=True,
    )
    return rate, cpu_us, wakes, sum(fulls)


def _consume(rings: list[Ring], bell: Doorbell, per_producer: int) -> int:
    expected = [0] * len(rings)
    remaining, wakes = len(rings) * per_producer, 0
    deadline = time.monotonic() + 120
    while remaining:
        got = 0
        for p, ring in enumerate(rings):
            while (message := ring.try_pop()) is not None:
                seq = expected[p]
                tokens = message.view.view(np.int32)
                if message.tag != seq or not np.array_equal(tokens, _tokens(p, seq)):
                    raise RuntimeError(f"producer {p} message {seq} arrived wrong")
                ring.release(message)
                expected[p] = seq + 1
                got += 1
        remaining -= got
        if remaining and not got:
            if time.monotonic() > deadline:
                raise RuntimeError(f"stalled with {remaining} messages missing")
            wakes += bell.wait(WAIT_S)
    return wakes


def environment() -> dict[str, object]:
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "numpy": np.__version__,
        "posix_ipc": posix_ipc.VERSION,
        "kernel": platform.release(),
    }


def _remove_leftovers(prefix: str) -> None:
    stem = prefix.lstrip("/")
    for entry in os.listdir("/dev/shm"):
        if entry.startswith((stem, "sem." + stem)):
            os.unlink(os.path.join("/dev/shm", entry))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations (about 10 s)")
    parser.add_argument("--client-wake", choices=["bell", "eventfd"], default="bell")
    # Unpinned by default: on a small shared VM a pinned process cannot flee a busy CPU, which
    # measured 2x slower medians and ms-scale p99s here.
    parser.add_argument("--pin", action="store_true", help="pin the client to CPU 0 and the echo to CPU 1")
    args = parser.parse_args()
    iterations = (
        {"1k": 2000, "64k": 1000, "1m": 200} if args.quick else {"1k": 20000, "64k": 5000, "1m": 1000}
    )
    per_producer = 5000 if args.quick else 20000
    prefix = f"/sie-bench.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    report: dict[str, object] = environment()
    report["client_wake"], report["pinned"] = args.client_wake, args.pin
    try:
        report.update(bench_rtt(prefix, args.client_wake, args.pin, iterations))
        report.update(bench_throughput(prefix, per_producer, 3 if args.quick else 5))
    finally:
        _remove_leftovers(prefix)
    report["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_echo":
        echo_main(*sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_produce":
        produce_main(*sys.argv[2:])
    else:
        main()
