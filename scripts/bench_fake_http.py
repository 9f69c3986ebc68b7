"""Serving's ceiling over HTTP with SIE's fake model (no forward): sie, the bare HTTP stack, sie-server.

    python scripts/bench_fake_http.py [--duration-s 15] [--connections 64] [--frontends 2]
                                      [--server-arg=--flag=value ...] [--no-bare]
                                      [--peer-script PATH]

`wrk` (Debian package `wrk`) posts one 10-40-word item per request to `/v1/encode/sie-fake` over
keep-alive connections, in turn against:
  - sie serving its built-in `sie-fake` (`--frontends` frontends, one CPU device);
  - the bare stack (scripts/_bare_stack.py: Starlette on hypercorn, `--frontends` workers, uvloop,
    msgspec decode + MiniLM tokenize + a fixed reply), what any Python frontend costs at least;
  - with `--peer-script PATH`, the real sie-server 0.10.1 serving its own sie-fake, started as
    `SIE_PEER_EXTRA_MODELS=sie-fake PATH PORT` and stopped as `PATH stop PORT` (a script that
    starts sie-server on a port and prints its PID last).
For each: requests/s, p50/p99 latency and CPU microseconds per request by process kind (from /proc).
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
from pathlib import Path
from typing import Any

from _server import cpu_by_role, cpu_seconds, free_port, server_pids, start_server, stop_server
from _wrk import body_script, run_wrk
from bench_overhead import mean_batch_size, measure_stack, request_bodies

from sie.catalog import load_catalog
from sie.model_location import resolve_weights_dir

MODEL = "sie-fake"
MINILM = "sentence-transformers/all-MiniLM-L6-v2"
JSON = "application/json"


def measure_sie(bodies: list[bytes], args: argparse.Namespace) -> dict[str, Any]:
    extra = ["--models", MODEL, "--preload", MODEL, *args.server_arg]
    process, url, _, log_path = start_server(args.frontends, extra, "fakehttp")
    try:
        script = body_script(Path(tempfile.mkdtemp()), bodies, f"/v1/encode/{MODEL}", JSON, JSON)
        run_wrk(url, script, 3, args.connections)  # warm-up
        roles = server_pids(process.pid)
        before = cpu_by_role(roles)
        result = run_wrk(url, script, args.duration_s, args.connections)
        spent = cpu_by_role(roles, since=before)
        n = max(result["requests"], 1)
        result["device_us_per_item"] = round(spent.get("device", 0.0) / n * 1e6, 1)
        result["frontend_us_per_request"] = round(spent.get("frontend", 0.0) / n * 1e6, 1)
        result["items_per_batch"] = mean_batch_size(url)
        result["server_log"] = str(log_path)
        return result
    finally:
        stop_server(process)


def measure_peer(bodies: list[bytes], args: argparse.Namespace, peer: Path) -> dict[str, Any]:
    port = free_port()
    env = {**os.environ, "SIE_PEER_EXTRA_MODELS": MODEL}
    started = subprocess.run([str(peer), str(port)], env=env, capture_output=True, text=True, check=True)
    pid = int(started.stdout.strip().splitlines()[-1])
    try:
        url = f"http://127.0.0.1:{port}"
        script = body_script(Path(tempfile.mkdtemp()), bodies, f"/v1/encode/{MODEL}", JSON, JSON)
        run_wrk(url, script, 3, args.connections)  # warm-up
        before = _tree_cpu(pid)
        result = run_wrk(url, script, args.duration_s, args.connections)
        result["server_us_per_request"] = round(
            (_tree_cpu(pid) - before) / max(result["requests"], 1) * 1e6, 1
        )
        return result
    finally:
        subprocess.run([str(peer), "stop", str(port)], capture_output=True, check=False)


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (read from /proc)."""
    return sum(cpu_seconds(p) for p in [pid, *server_pids(pid)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration-s", type=float, default=15.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument("--server-arg", action="append", default=[], help="extra flag for sie serve")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare HTTP stack")
    parser.add_argument("--peer-script", type=Path, help="starts sie-server (see above); without it, no peer")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")
    bodies = request_bodies(500)
    report: dict[str, Any] = {
        "connections": args.connections,
        "frontends": args.frontends,
        "cores": os.cpu_count(),
    }
    report["sie"] = measure_sie(bodies, args)
    print(f"sie: {report['sie']}", flush=True)
    if not args.no_bare:
        tokenizer = resolve_weights_dir(load_catalog().get(MINILM)) / "tokenizer.json"
        report["bare"] = measure_stack(
            bodies, "_bare_stack:app", {"BARE_STACK_TOKENIZER": str(tokenizer)}, args, "uvloop"
        )
        report["sie_vs_bare"] = round(report["sie"]["requests_per_s"] / report["bare"]["requests_per_s"], 3)
        print(f"bare stack: {report['bare']}", flush=True)
    if args.peer_script is not None:
        if not args.peer_script.is_file():
            raise SystemExit(f"no {args.peer_script}")
        report["sie_server"] = measure_peer(bodies, args, args.peer_script)
        report["sie_vs_sie_server"] = round(
            report["sie"]["requests_per_s"] / report["sie_server"]["requests_per_s"], 2
        )
        print(f"sie-server: {report['sie_server']}", flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
