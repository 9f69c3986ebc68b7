"""Does hypercorn's one-write patch (`sie/frontend/h11_writes.py`) still pay? The same stack with and
without it, in alternating pairs of `wrk` runs.

    python scripts/bench_h11_writes.py [--stack app|bare] [--pairs 6] [--duration-s 5] [--connections 64]

`app` is sie's frontend app with a device that answers at once (scripts/_app_stack.py), `bare` the
bare HTTP stack (scripts/_bare_stack.py); both on 2 hypercorn workers with uvloop, one 10-40-word
JSON item per request, as in `bench_overhead.py`. Each pair runs both settings, in alternating
order; reported are every run's requests/s and worker CPU per request, and the medians.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_overhead import MINILM, build_tiny_model, measure_stack, request_bodies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack", choices=["app", "bare"], default="app")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--duration-s", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args(argv)
    args.frontends = 2
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is missing: apt-get install wrk")
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory() as tmp:
        models_dir = build_tiny_model(Path(tmp))
        env = {
            "STACK": "_app_stack" if args.stack == "app" else "_bare_stack",
            "APP_STACK_MODELS": str(models_dir),
            "BARE_STACK_TOKENIZER": str(Path(tmp) / "tiny" / "tokenizer.json"),
        }
        bodies = request_bodies(500)
        for pair in range(args.pairs):
            for setting in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                env["H11_WRITES"] = "1" if setting == "on" else "0"
                result = measure_stack(bodies, "_patched_stack:app", env, args, "uvloop")
                runs[setting].append(result)
                print(f"pair {pair} {setting}: {result}", flush=True)
    report: dict[str, Any] = {"stack": args.stack, "model": MINILM, "runs": runs}
    for setting, results in runs.items():
        report[f"{setting}_median_requests_per_s"] = statistics.median(r["requests_per_s"] for r in results)
        report[f"{setting}_median_worker_us_per_request"] = statistics.median(
            r["worker_us_per_request"] for r in results
        )
    report["pairs_faster_on"] = sum(
        on["requests_per_s"] > off["requests_per_s"] for on, off in zip(runs["on"], runs["off"], strict=True)
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
