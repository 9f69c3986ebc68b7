"""Throughput over K models that do not all fit in the device's memory (`bench.py --models K`).

    python scripts/bench_models.py [--models 6] [--fit 3] [--concurrency 8] [--duration-s 30]
                                   [--items-per-request 4] [--retry-s 0.5] [--seed 0]

Builds K random BERT encoders (about 60 MB of float32 weights each, MiniLM's tokenizer) in a
temporary models directory, then runs the same load twice against a throwaway server:

1. `unbounded`: no memory bound, every model stays loaded once loaded;
2. `bounded`: `--device-memory-bytes` set so that `--fit` of them fit under the threshold and
   the next does not (a bound on a CPU device counts the bytes its models hold).

Each of `--concurrency` clients sends requests to a model drawn uniformly at random; a request
answered 503 MODEL_LOADING is retried after `--retry-s` (the SDK waits the Retry-After, 5 s;
a shorter wait measures the server, not the client's patience). Reported per run: items/s of
answered requests, p50/p99 latency including retries, the 503s, and the reloads (`loads` summed
over the models in /v1/models, minus the first load of each).

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from _server import start_server, stop_server  # scripts/ is on sys.path as a script

THRESHOLD_PERCENT = 85
HIDDEN = 256
WORDS = ["the", "a", "protein", "cell", "gene", "risk", "mice", "model", "data", "study", "effect"]


def build_models(root: Path, k: int) -> tuple[Path, list[str], int]:
    """K random encoders and their YAML files; (models dir, ids, bytes of one model's weights)."""
    import torch
    import transformers

    from sie.catalog import load_catalog
    from sie.model_location import resolve_weights_dir
    from sie.settings import DEFAULT_MODEL

    tokenizer_dir = resolve_weights_dir(load_catalog().get(DEFAULT_MODEL))
    models_dir = root / "models"
    models_dir.mkdir(parents=True)
    config = transformers.BertConfig(
        hidden_size=HIDDEN, num_hidden_layers=3, num_attention_heads=4, intermediate_size=16 * HIDDEN
    )
    names = []
    for i in range(k):
        name, folder = f"bench/m{i}", root / f"m{i}"
        torch.manual_seed(i)
        transformers.BertModel(config).save_pretrained(folder)
        for file in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
            shutil.copy(tokenizer_dir / file, folder / file)
        spec = {"sie_id": name, "weights": {"path": str(folder)}, "adapter": "dense",
                "tasks": {"encode": {"dense": {"dim": HIDDEN}}}, "max_sequence_length": 128}  # fmt: skip
        (models_dir / f"m{i}.yaml").write_text(yaml.safe_dump(spec))
        names.append(name)
    return models_dir, names, (root / "m0" / "model.safetensors").stat().st_size


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    items: int = 0
    loading_503: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def client(
    url: str, names: list[str], args: argparse.Namespace, stop_s: float, seed: int, tally: Tally
) -> None:
    rng = random.Random(seed)
    with httpx.Client(timeout=120) as http:
        while time.monotonic() < stop_s:
            name = rng.choice(names)
            texts = [
                " ".join(rng.choices(WORDS, k=rng.randint(10, 40))) for _ in range(args.items_per_request)
            ]
            body = {"items": [{"text": t} for t in texts]}
            started = time.monotonic()
            while True:
                response = http.post(
                    f"{url}/v1/encode/{name}", json=body, headers={"accept": "application/json"}
                )
                if response.status_code != 503 or time.monotonic() >= stop_s:
                    break
                with tally.lock:
                    tally.loading_503 += 1
                time.sleep(args.retry_s)
            with tally.lock:
                if response.status_code == 200:
                    tally.items += len(texts)
                    tally.latencies_ms.append((time.monotonic() - started) * 1000)
                elif response.status_code != 503:
                    tally.errors += 1


def run_load(url: str, names: list[str], args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    started = time.monotonic()
    stop_s = started + args.duration_s
    threads = [
        threading.Thread(target=client, args=(url, names, args, stop_s, args.seed + i, tally))
        for i in range(args.concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    models = httpx.get(f"{url}/v1/models", timeout=30).json()["models"]
    loads = sum(m.get("loads", 0) for m in models)
    ordered = sorted(tally.latencies_ms) or [0.0]
    return {
        "items_per_s": round(tally.items / elapsed, 1),
        "requests_ok": len(tally.latencies_ms),
        "p50_ms": round(statistics.median(ordered), 1),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 1),
        "model_loading_503": tally.loading_503,
        "errors": tally.errors,
        "loads": loads,
        "reloads": max(0, loads - sum(1 for m in models if m.get("loads", 0))),
        "loaded_at_end": sum(1 for m in models if m["state"] == "loaded"),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=6, help="K: models the requests spread over")
    parser.add_argument("--fit", type=int, help="models that fit under the bound (default K // 2)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--items-per-request", type=int, default=4)
    parser.add_argument("--retry-s", type=float, default=0.5, help="wait before retrying a 503")
    parser.add_argument("--frontends", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.fit = args.fit or max(1, args.models // 2)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="sie-bench-models-"))
    try:
        models_dir, names, model_bytes = build_models(root, args.models)
        capacity = int((args.fit + 0.5) * model_bytes * 100 / THRESHOLD_PERCENT)
        result: dict[str, Any] = {
            **{k: getattr(args, k) for k in ("models", "fit", "concurrency", "duration_s", "retry_s")},
            "items_per_request": args.items_per_request,
            "model_bytes": model_bytes,
            "device_memory_bytes": capacity,
        }
        bounds = {"unbounded": [], "bounded": ["--device-memory-bytes", str(capacity)]}
        for label, bound in bounds.items():
            extra = [
                "--models-dir",
                str(models_dir),
                "--memory-pressure-threshold-percent",
                str(THRESHOLD_PERCENT),
            ]
            process, url, _, _ = start_server(args.frontends, [*extra, *bound], "benchm")
            try:
                result[label] = run_load(url, names, args)
            finally:
                stop_server(process)
            print(json.dumps({label: result[label]}), file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
