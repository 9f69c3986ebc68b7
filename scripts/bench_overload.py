"""Goodput under overload: requests answered 200 per second when clients ask for more than a
model's queue admits, against the same server's capacity.

    python scripts/bench_overload.py [--seconds 10] [--connections 8,256] [--cap 64] [--items 8]
                                     [--frontends 2] [--server-arg=--flag=value ...]

sie serves MiniLM with `--max-concurrent-requests CAP`. `wrk` (Debian package `wrk`) posts
requests of ITEMS 10-40-word texts each over keep-alive connections, and a client whose request
is refused sends its next one at once, as a retry loop without backoff does. Few connections
(CAP / ITEMS or fewer) never fill the queue: that run is the capacity. Many connections keep it
full, so most requests are refused 503 QUEUE_FULL; a server whose refusals are cheap keeps its
200s near the capacity. For each connection count: 200s/s, 503s/s, p50 and p99 over all answers,
and CPU seconds per process kind. The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _server import cpu_by_role, server_pids, start_server, stop_server
from _wrk import body_script, run_wrk
from bench_overhead import request_bodies

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", default="8,256")
    parser.add_argument("--cap", type=int, default=64, help="--max-concurrent-requests of the server")
    parser.add_argument("--items", type=int, default=8, help="texts per request")
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument("--server-arg", action="append", default=[])
    args = parser.parse_args()

    extra = ["--models", MODEL, "--max-concurrent-requests", str(args.cap), *args.server_arg]
    process, url, _, _ = start_server(args.frontends, extra, "overload")
    results: dict[str, Any] = {"cap": args.cap, "items": args.items, "frontends": args.frontends, "runs": {}}
    try:
        with tempfile.TemporaryDirectory() as folder:
            target, json_type = f"/v1/encode/{MODEL}", "application/json"
            bodies = request_bodies(64, items=args.items)
            script = body_script(Path(folder), bodies, target, json_type, json_type)
            run_wrk(url, script, 3, 8)  # warm-up: the model loads, the tokenizer and the forward warm
            roles = server_pids(process.pid)
            for connections in (int(c) for c in args.connections.split(",")):
                before, started = cpu_by_role(roles), time.monotonic()
                run = run_wrk(url, script, args.seconds, connections)
                elapsed = time.monotonic() - started
                spent = cpu_by_role(roles, before)
                refused = run.pop("non_2xx")
                run["ok_per_s"] = round((run["requests"] - refused) / elapsed, 1)
                run["refused_per_s"] = round(refused / elapsed, 1)
                run["cpu_s"] = {role: round(seconds, 2) for role, seconds in spent.items()}
                results["runs"][connections] = run
                print(f"{connections} connections: {run}", file=sys.stderr)
    finally:
        stop_server(process)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
