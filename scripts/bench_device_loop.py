"""The device loop's ceiling: one device process fed straight through its rings, no HTTP.

    python scripts/bench_device_loop.py [--producers 3] [--duration-s 10] [--window 192]
                                        [--max-batch-requests 64] [--words 10-40] [--profile DIR]

This script plays the supervisor: it creates the shared memory (control block, rings, doorbell),
shares a catalog holding `sie-fake` and starts a real device process (`python -m sie _device`),
exactly as `sie serve` does. Then `--producers` processes play frontends: each keeps `--window`
single-item encode requests (10-40 words, tokenized ahead of time, one token per code point as
the frontends tokenize for sie-fake) in flight on its own ring pair, rings the device's doorbell
once per burst and reads its results on its eventfd. sie-fake computes in microseconds, so what is
measured is the loop itself: draining, batching (up to `--max-batch-requests` items), padding,
the runner, slicing results per request and publishing them.

Reported: items/s, the device process's CPU microseconds per item (from /proc, over the measured
interval only), batches and mean batch size (from the statistics block), and the producers' own
CPU per item. On a box with few cores the producers compete with the device for CPU, so items/s
is a floor; the device's CPU per item is the figure that says what one device process can feed.
`--profile DIR` records the device with py-spy (collapsed stacks) during the measured interval.
The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

try:
    import sie  # noqa: F401
except ModuleNotFoundError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec
import numpy as np

from sie.catalog import load_catalog
from sie.catalog_defaults import with_server_defaults
from sie.frontend.code_points import CodePointTokenizer
from sie.settings import Settings
from sie.shared_catalog import share_catalog
from sie.shm.control import ControlBlock, DeviceState, ModelState
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.layout import Op, ResultKind, Status, TokenBatch, encode_request, mask_of
from sie.shm.names import Namespace
from sie.shm.ring import Ring
from sie.specs import DeviceSpec
from sie.supervisor.children import Child
from sie.supervisor.resources import SharedResources

MODEL = "sie-fake"
WORDS = ["protein", "cell", "gene", "expression", "mice", "treatment", "patients", "study", "results"]
READY_TIMEOUT_S = 120.0


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- a producer (a process per frontend) -----------------------------------------------------------------
def payloads(slot: int, n: int, words: tuple[int, int], seed: int) -> list[np.ndarray]:
    """`n` encoded single-item requests (req_id 0: set before each push)."""
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))) for _ in range(n)]
    mask = mask_of({ResultKind.DENSE})
    made = []
    for text in texts:
        encoded = CodePointTokenizer(512).encode([text])
        batch = TokenBatch(0, Op.ENCODE, slot, encoded.offsets, encoded.input_ids, output_mask=mask)
        made.append(encode_request(batch))
    return made


def produce(args: argparse.Namespace) -> int:
    namespace = Namespace(args.instance, args.supervisor_pid)
    control = ControlBlock.attach(namespace.control())
    me = args.producer
    gen = control.pair_generation(0, me)
    requests = Ring.attach(namespace.ring(0, me, gen, "req"))
    results = Ring.attach(namespace.ring(0, me, gen, "resp"))
    bell = Doorbell.attach(namespace.doorbell(0, control.device_generation(0)))
    wake = EventFd(args.eventfd)
    poll = select.poll()
    poll.register(wake.fd, select.POLLIN)
    bodies = payloads(args.slot, 512, (args.min_words, args.max_words), seed=me)
    heads = [body[:8].view("<u8") for body in bodies]
    start_at, stop_at = args.start_at, args.start_at + args.duration_s
    req_id = me << 40
    outstanding = counted = failed = 0
    cpu_start = 0.0
    print("ready", flush=True)
    while (now := time.time()) < stop_at + 5 and (now < stop_at or outstanding):
        pushed = False
        while now < stop_at and outstanding < args.window:
            k = req_id % len(bodies)
            heads[k][0] = req_id
            if not requests.try_push(bodies[k], req_id):
                break
            req_id += 1
            outstanding += 1
            pushed = True
        if pushed:
            bell.ring()
        poll.poll(100)
        wake.clear()
        in_window = start_at <= time.time() < stop_at
        if in_window and not cpu_start:
            cpu_start = time.process_time()
        while (message := results.try_pop()) is not None:
            status = int(message.view[8:10].view("<u2")[0])
            results.release(message)
            outstanding -= 1
            if status != Status.OK:
                failed += 1
            elif in_window:
                counted += 1
    cpu = time.process_time() - cpu_start
    print(json.dumps({"items": counted, "failed": failed, "cpu_s": cpu, "left": outstanding}), flush=True)
    return 0


# -- the run (this process is the supervisor) --------------------------------------------------------------
def start_device(args: argparse.Namespace) -> tuple[SharedResources, Child, int, Namespace]:
    settings = Settings(
        frontends=args.producers,
        device="cpu",
        max_batch_requests=args.max_batch_requests,
        max_batch_tokens=args.max_batch_tokens,
        max_concurrent_requests=max(512, args.producers * args.window),
        instance="bdl" + uuid.uuid4().hex[:8],
        log_level="warning",
    )
    catalog = with_server_defaults(load_catalog(include=[MODEL]), settings)
    slot = catalog.slot(MODEL)
    namespace = Namespace(settings.instance, os.getpid())
    resources = SharedResources(namespace, settings, 1, args.producers, len(catalog))
    catalog_fd = share_catalog(catalog)
    spec = DeviceSpec(
        index=0,
        device="cpu",
        instance=settings.instance,
        supervisor_pid=os.getpid(),
        eventfds=resources.eventfd_numbers(),
        preload_slots=[slot],
        catalog_fd=catalog_fd,
    )
    device = Child("device", 0)
    device.start(settings, msgspec.json.encode(spec).decode(), (*spec.eventfds, catalog_fd))
    deadline = time.monotonic() + READY_TIMEOUT_S
    control = resources.control
    while not (
        control.device_state(0) == DeviceState.UP and control.model_state(0, slot) == ModelState.LOADED
    ):
        if time.monotonic() > deadline or (device.process and device.process.poll() is not None):
            raise SystemExit("the device process did not come up with sie-fake loaded")
        time.sleep(0.05)
    return resources, device, slot, namespace


def batch_counts(resources: SharedResources, slot: int) -> tuple[int, int, float]:
    """(batches, items, forward seconds) the device has recorded for the model so far."""
    v = resources.stats.v
    return (
        int(v["batch_size_buckets"][0, slot].sum()),
        int(v["batch_items"][0, slot]),
        float(v["forward_s"][0, slot]),
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    resources, device, slot, namespace = start_device(args)
    assert device.process is not None
    producers: list[subprocess.Popen[str]] = []
    try:
        start_at = time.time() + args.warmup_s + 2.0  # producers start and warm up before the interval
        for i, wake in enumerate(resources.eventfds):
            argv = [sys.executable, __file__, "--producer", str(i), "--instance", namespace.instance,
                    "--supervisor-pid", str(os.getpid()), "--eventfd", str(wake.fd), "--slot", str(slot),
                    "--start-at", repr(start_at), "--duration-s", str(args.duration_s),
                    "--window", str(args.window), "--min-words", str(args.min_words),
                    "--max-words", str(args.max_words)]  # fmt: skip
            producers.append(subprocess.Popen(argv, pass_fds=(wake.fd,), stdout=subprocess.PIPE, text=True))
        for producer in producers:
            assert producer.stdout is not None and producer.stdout.readline().strip() == "ready"
        time.sleep(max(0.0, start_at - time.time()))
        profiler = start_profile(device.process.pid, args) if args.profile else None
        cpu0, stats0 = cpu_seconds(device.process.pid), batch_counts(resources, slot)
        time.sleep(args.duration_s)
        cpu1, stats1 = cpu_seconds(device.process.pid), batch_counts(resources, slot)
        reports = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in producers]
        if profiler is not None:
            profiler.wait(60)
    finally:
        for producer in producers:
            if producer.poll() is None:
                producer.kill()
        device.process.terminate()
        device.process.wait(30)
        resources.close()
    items = sum(r["items"] for r in reports)
    batches, batch_items, forward_s = (b - a for a, b in zip(stats0, stats1, strict=True))
    return {
        "producers": args.producers,
        "window": args.window,
        "max_batch_requests": args.max_batch_requests,
        "duration_s": args.duration_s,
        "items": items,
        "items_per_s": round(items / args.duration_s, 1),
        "device_cpu_us_per_item": round((cpu1 - cpu0) / max(items, 1) * 1e6, 2),
        "device_cpu_share": round((cpu1 - cpu0) / args.duration_s, 3),
        "batches": batches,
        "mean_batch_items": round(batch_items / max(batches, 1), 1),
        "fake_forward_us_per_item": round(forward_s / max(batch_items, 1) * 1e6, 2),
        "producer_cpu_us_per_item": round(sum(r["cpu_s"] for r in reports) / max(items, 1) * 1e6, 2),
        "failed": sum(r["failed"] for r in reports),
        "cores": os.cpu_count(),
    }


def start_profile(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    args.profile.mkdir(parents=True, exist_ok=True)
    # --gil: samples only while the loop holds the GIL, so waits and wake-up syscalls do not count
    argv = [spy, "record", "--format", "raw", "--rate", "250", "--duration", str(int(args.duration_s)),
            "--nonblocking", "--gil", "--pid", str(pid),
            "--output", str(args.profile / f"device-{pid}.txt")]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=2.0)
    parser.add_argument("--window", type=int, default=192, help="requests in flight per producer")
    parser.add_argument("--max-batch-requests", type=int, default=64)
    # sie-fake's YAML keeps the default budget, which a CPU device would cut to 2,048 tokens (see
    # sie.gpu_proc.batcher); the ceiling is about the item cap, so the budget is set past it.
    parser.add_argument("--max-batch-tokens", type=int, default=64 * 512)
    parser.add_argument("--min-words", type=int, default=10)
    parser.add_argument("--max-words", type=int, default=40)
    parser.add_argument("--profile", type=Path, help="py-spy collapsed stacks of the device go here")
    # A producer's own arguments (the script starts them).
    parser.add_argument("--producer", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--instance", help=argparse.SUPPRESS)
    parser.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--eventfd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--slot", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.producer is not None:
        return produce(args)
    report = run(args)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
