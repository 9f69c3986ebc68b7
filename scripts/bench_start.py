"""What a server's start costs: CPU seconds per process until /readyz answers, and the catalog read.

    python scripts/bench_start.py [--rounds 3] [--frontends 2] [--server-arg=--flag=value ...]

Each round starts `python -m sie serve` on the built-in catalog and its default model (one CPU
device), reads every process's CPU time from /proc once the server is ready, and stops it. The
catalog read is `load_catalog()` of the built-in directory in this process (its imports done by a
first call, not timed). The last stdout line is one JSON object: per round, the CPU seconds of the
supervisor, each frontend and the device; the catalog read's CPU seconds, best of `--rounds`.
"""

from __future__ import annotations

import argparse
import json
import time

from _server import cpu_seconds, server_pids, start_server, stop_server

from sie.catalog import load_catalog


def start_round(frontends: int, extra: list[str]) -> dict[str, object]:
    process, _, _, _ = start_server(frontends, extra, "start")
    try:
        roles = server_pids(process.pid)
        by_role: dict[str, list[float]] = {}
        for pid, role in sorted(roles.items()):
            by_role.setdefault(role, []).append(round(cpu_seconds(pid), 2))
    finally:
        stop_server(process)
    return by_role


def catalog_read_s(rounds: int) -> float:
    load_catalog()  # imports, compiled regexes
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        load_catalog()
        best = min(best, time.process_time() - started)
    return round(best, 3)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument("--server-arg", action="append", default=[], help="passed to `sie serve`")
    args = parser.parse_args()
    starts = [start_round(args.frontends, args.server_arg) for _ in range(args.rounds)]
    for n, start in enumerate(starts, 1):
        print(f"start {n}: " + ", ".join(f"{role} {seconds}" for role, seconds in start.items()))
    catalog = catalog_read_s(args.rounds)
    print(f"catalog read: {catalog} s of CPU")
    print(json.dumps({"starts_cpu_s": starts, "catalog_read_cpu_s": catalog}))


if __name__ == "__main__":
    main()
