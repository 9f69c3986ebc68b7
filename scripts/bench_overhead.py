"""What serving costs around a forward pass that is nearly free: requests/s and CPU per request.

    python scripts/bench_overhead.py [--duration-s 15] [--connections 64] [--frontends 2]
                                     [--server-arg=--flag=value ...] [--no-bare]

It builds a tiny random BERT (1 layer, hidden 32) with all-MiniLM-L6-v2's tokenizer and serves it
under the MiniLM id, so the model costs almost nothing and everything else shows: HTTP, decoding,
tokenizing, ring messages, batching, rendering. `wrk` (Debian package `wrk`, a C load generator
that costs little CPU) sends one 10-40-word JSON item per request over keep-alive connections.

In the same run it measures the bare HTTP stack (scripts/_bare_stack.py: Starlette on hypercorn,
2 workers, msgspec decode + tokenize + a fixed JSON reply) as the ceiling, with the asyncio loop
and with uvloop. For sie it reports the CPU time each process kind spent per request (from /proc):
device microseconds per item and frontend microseconds per request; for the bare stack its
workers' microseconds per request, the floor under a frontend's figure (a frontend does all the
bare stack does, and more).

Between the two it measures sie's own frontend app with a device that answers at once
(scripts/_app_stack.py, 2 hypercorn workers, uvloop): everything a frontend does except the
round trip through the rings, so the gap to the bare stack is the app's and the rest the device's.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _server import REPO, cpu_by_role, free_port, server_pids, start_server, stop_server
from _wrk import body_script, run_wrk

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
JSON = "application/json"
# How sie's supervisor starts its frontends: one tokenizer thread each, so the comparison stacks'
# workers tokenize the same way (a one-text call handed to a thread pool costs tens of µs more).
SINGLE_THREADED_TOKENIZER = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}
WORDS = [
    "protein",
    "cell",
    "gene",
    "expression",
    "mice",
    "treatment",
    "patients",
    "study",
    "results",
    "analysis",
    "levels",
    "increased",
    "decreased",
    "response",
    "disease",
    "clinical",
    "data",
    "model",
    "effect",
    "risk",
    "factors",
    "associated",
    "significant",
    "human",
    "tumor",
    "growth",
    "signaling",
    "pathway",
    "receptor",
    "activity",
    "function",
    "role",
    "evidence",
]


def build_tiny_model(root: Path) -> Path:
    """A models dir serving a 1-layer, hidden-32 random BERT under the MiniLM id."""
    import torch
    import transformers
    import yaml

    from sie.catalog import load_catalog
    from sie.model_location import resolve_weights_dir

    minilm = resolve_weights_dir(load_catalog().get(MINILM))
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    torch.manual_seed(0)
    folder = root / "tiny"
    transformers.BertModel(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(minilm / name, folder / name)
    models = root / "models"
    models.mkdir()
    body = {
        "sie_id": MINILM,
        "weights": {"path": str(folder)},
        "tasks": {"encode": {"dense": {"dim": 32}}},
        "max_sequence_length": 256,
        "adapter": "dense",
    }
    (models / "tiny.yaml").write_text(yaml.safe_dump(body))
    return models


def request_bodies(n: int, seed: int = 0, items: int = 1) -> list[bytes]:
    """`n` JSON encode bodies of `items` 10-40-word texts each."""
    import random

    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 40))) for _ in range(n * items)]
    return [
        json.dumps({"items": [{"text": t} for t in texts[i : i + items]]}).encode()
        for i in range(0, len(texts), items)
    ]


def measure_stack(
    bodies: list[bytes], app: str, env: dict[str, str], args: argparse.Namespace, loop: str
) -> dict[str, Any]:
    """One of the comparison stacks (`app`, e.g. "_bare_stack:app") on hypercorn, `--frontends` workers."""
    port = free_port()
    env = {
        **os.environ,
        **env,
        **SINGLE_THREADED_TOKENIZER,
        "PYTHONPATH": os.pathsep.join([str(REPO / "scripts"), str(REPO)]),
    }
    argv = [sys.executable, "-m", "hypercorn", "-w", str(args.frontends), "-b", f"127.0.0.1:{port}",
            "--worker-class", loop, app]  # fmt: skip
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_for_port(port)
        script = body_script(Path(tempfile.mkdtemp()), bodies, f"/v1/encode/{MINILM}", JSON, JSON)
        run_wrk(url, script, 3, args.connections)  # warm-up
        roles = server_pids(process.pid)
        before = cpu_by_role(roles)
        result = run_wrk(url, script, args.duration_s, args.connections)
        spent = cpu_by_role(roles, since=before)
        workers = sum(seconds for role, seconds in spent.items() if role != "supervisor")
        result["worker_us_per_request"] = round(workers / max(result["requests"], 1) * 1e6, 1)
        return result
    finally:
        process.terminate()
        process.wait(30)


def _wait_for_port(port: int, timeout_s: float = 30) -> None:
    import socket

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def measure_sie(bodies: list[bytes], models_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--models-dir", str(models_dir), *args.server_arg]
    process, url, _, log_path = start_server(args.frontends, extra, "overhead")
    try:
        script = body_script(Path(tempfile.mkdtemp()), bodies, f"/v1/encode/{MINILM}", JSON, JSON)
        run_wrk(url, script, 3, args.connections)  # warm-up: tokenizer caches, allocator, JIT-less paths
        roles = server_pids(process.pid)
        profilers = start_profiles(roles, args.profile, args.duration_s) if args.profile else []
        before = cpu_by_role(roles)
        result = run_wrk(url, script, args.duration_s, args.connections)
        for profiler in profilers:
            profiler.wait(30)
        spent = cpu_by_role(roles, since=before)
        n = max(result["requests"], 1)
        result["device_us_per_item"] = round(spent.get("device", 0.0) / n * 1e6, 1)
        result["frontend_us_per_request"] = round(spent.get("frontend", 0.0) / n * 1e6, 1)
        result["supervisor_us_per_request"] = round(spent.get("supervisor", 0.0) / n * 1e6, 1)
        result["items_per_batch"] = mean_batch_size(url)
        result["server_log"] = str(log_path)
        return result
    finally:
        stop_server(process)


def mean_batch_size(url: str) -> float | None:
    """Items per forward batch over the server's life, from its /metrics histogram."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    page = httpx.get(url + "/metrics", timeout=10).text
    totals = {"sie_batch_size_sum": 0.0, "sie_batch_size_count": 0.0}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    count = totals["sie_batch_size_count"]
    return round(totals["sie_batch_size_sum"] / count, 2) if count else None


def start_profiles(roles: dict[int, str], out: Path, seconds: float) -> list[subprocess.Popen[bytes]]:
    """py-spy on every server process for the measured run, as collapsed stacks (one file each)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    argv = [
        spy,
        "record",
        "--format",
        "raw",
        "--rate",
        "200",
        "--duration",
        str(int(seconds)),
        "--nonblocking",
    ]
    return [
        subprocess.Popen(
            [*argv, "--pid", str(pid), "--output", str(out / f"{role}-{pid}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid, role in roles.items()
        if role in ("device", "frontend")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration-s", type=float, default=15.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument("--server-arg", action="append", default=[], help="extra flag for sie serve")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare HTTP stack")
    parser.add_argument("--profile", type=Path, help="write py-spy collapsed stacks of each process here")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")
    bodies = request_bodies(500)
    report: dict[str, Any] = {"connections": args.connections, "frontends": args.frontends}
    with tempfile.TemporaryDirectory() as tmp:
        models_dir = build_tiny_model(Path(tmp))
        if not args.no_bare:
            tokenizer = {"BARE_STACK_TOKENIZER": str(Path(tmp) / "tiny" / "tokenizer.json")}
            for loop in ("asyncio", "uvloop"):
                report[f"bare_{loop}"] = measure_stack(bodies, "_bare_stack:app", tokenizer, args, loop)
                print(f"bare stack ({loop}): {report[f'bare_{loop}']}", flush=True)
            models = {"APP_STACK_MODELS": str(models_dir)}
            report["app_instant_device"] = measure_stack(bodies, "_app_stack:app", models, args, "uvloop")
            print(f"sie's app, instant device: {report['app_instant_device']}", flush=True)
        report["sie"] = measure_sie(bodies, models_dir, args)
    print(f"sie: {report['sie']}", flush=True)
    if "bare_uvloop" in report:
        best = max(report["bare_asyncio"]["requests_per_s"], report["bare_uvloop"]["requests_per_s"])
        report["sie_vs_best_bare"] = round(report["sie"]["requests_per_s"] / best, 3)
        report["app_vs_best_bare"] = round(report["app_instant_device"]["requests_per_s"] / best, 3)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
