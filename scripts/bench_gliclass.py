"""GLiClass zero-shot classification: items/s of this server against the `gliclass` pipeline, same weights.

    python scripts/bench_gliclass.py [--layout deberta] [--labels 5] [--items 512] [--rounds 5]
                                     [--concurrency 8] [--items-per-request 8] [--hidden H --layers N]

Builds the tests' tiny random-weight GLiClass (tests/tiny_models/gliclass.py) in a temporary
models directory, starts a throwaway server with it preloaded, and then, round by round, classifies
the same `--items` texts both ways:

1. `pipeline`: gliclass's ZeroShotClassificationPipeline in this process, in its batches of
   `--pipeline-batch-size` (its default, 8);
2. `server`: `--concurrency` clients sending requests of `--items-per-request` texts (JSON in,
   msgpack out as the SDK asks; single-label) until every text is answered.

The rounds alternate so that a busy machine slows both alike; each way's best round is reported
(and its median). Texts are random sentences of 4 to 60 words over a small vocabulary. The server's
scores are checked against the pipeline's first. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import torch
import yaml
from _server import start_server, stop_server, timed_posts  # scripts/ is on sys.path when run as a script

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' tiny model builder

from tests.tiny_models.gliclass import ENCODER, WORDS, make_gliclass, model_yaml_gliclass, pipeline

MODEL = "bench/gliclass"
LABELS = ["billing", "bug report", "feature request", "sports", "finance", "politics", "travel", "food"]


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    vocabulary = [word for line in WORDS for word in line.split()]
    return [" ".join(rng.choices(vocabulary, k=rng.randint(4, 60))) for _ in range(n)]


def pipeline_round(reference: Any, texts: list[str], labels: list[str], batch_size: int) -> float:
    """Seconds the pipeline takes to classify `texts`."""
    started = time.perf_counter()
    reference(texts, labels, threshold=0.0, batch_size=batch_size)
    return time.perf_counter() - started


def check_scores(url: str, folder: Path, texts: list[str], labels: list[str]) -> float:
    """Largest score difference between the server and the pipeline on a few texts."""
    body = {"items": [{"text": t} for t in texts], "params": {"labels": labels}}
    headers = {"accept": "application/json"}
    items = httpx.post(f"{url}/v1/extract/{MODEL}", json=body, headers=headers, timeout=60).json()["items"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = pipeline(folder)(texts, labels, threshold=0.0, return_hierarchical=True)
    return max(
        abs(c["score"] - scores[c["label"]])
        for item, scores in zip(items, want, strict=True)
        for c in item["classifications"]
    )


def server_round(url: str, texts: list[str], labels: list[str], args: argparse.Namespace) -> float:
    """Seconds the server takes to classify `texts`, sent by concurrent clients in small requests."""
    size = args.items_per_request
    bodies = [
        {"items": [{"text": t} for t in texts[i : i + size]], "params": {"labels": labels}}
        for i in range(0, len(texts), size)
    ]
    return timed_posts(f"{url}/v1/extract/{MODEL}", bodies, args.concurrency, timeout_s=60)


def summary(seconds: list[float], n_items: int) -> dict[str, Any]:
    # The best round is the one least slowed by whatever else the machine runs.
    return {
        "items_per_s": round(n_items / min(seconds), 1),
        "median_items_per_s": round(n_items / statistics.median(seconds), 1),
        "rounds_s": [round(s, 3) for s in seconds],
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layout", default="deberta", help="a layout of tests/tiny_models/gliclass.py")
    parser.add_argument("--labels", type=int, default=5, help=f"labels per request (at most {len(LABELS)})")
    parser.add_argument("--items", type=int, default=512, help="texts classified per round, each way")
    parser.add_argument("--pipeline-batch-size", type=int, default=8, help="the pipeline's default is 8")
    parser.add_argument(
        "--pipeline-threads", type=int, help="torch threads of the pipeline (default: torch's)"
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--items-per-request", type=int, default=8)
    parser.add_argument("--frontends", type=int, default=1)
    parser.add_argument("--hidden", type=int, help="a wider encoder than the tests' (heads of 32 dims)")
    parser.add_argument("--layers", type=int, help="a deeper encoder than the tests'")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    labels = LABELS[: args.labels]
    texts = random_texts(args.items, args.seed)
    if args.hidden:  # the same layouts with more compute per token, so the forward weighs more
        ENCODER.update(
            hidden_size=args.hidden, num_attention_heads=args.hidden // 32, intermediate_size=4 * args.hidden
        )
    if args.layers:
        ENCODER["num_hidden_layers"] = args.layers
    root = Path(tempfile.mkdtemp(prefix="sie-bench-gliclass-"))
    try:
        folder = make_gliclass(root / "weights", args.layout)
        models_dir = root / "models"
        models_dir.mkdir()
        (models_dir / "bench__gliclass.yaml").write_text(yaml.safe_dump(model_yaml_gliclass(MODEL, folder)))
        result: dict[str, Any] = {
            **{
                k: getattr(args, k) for k in ("layout", "labels", "items", "concurrency", "items_per_request")
            },
            **{k: ENCODER[k] for k in ("hidden_size", "num_hidden_layers")},
        }
        extra = ["--models-dir", str(models_dir), "--preload", MODEL]
        process, url, _, _ = start_server(args.frontends, extra, "benchgc")
        try:
            result["max_score_diff"] = check_scores(url, folder, texts[:16], labels)
            if args.pipeline_threads:
                torch.set_num_threads(args.pipeline_threads)
            result["pipeline_threads"] = torch.get_num_threads()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reference = pipeline(folder)
            pipeline_round(reference, texts[:16], labels, args.pipeline_batch_size)  # warm up both
            server_round(url, texts[:64], labels, args)
            timings: dict[str, list[float]] = {"pipeline": [], "server": []}
            for _ in range(args.rounds):
                timings["pipeline"].append(pipeline_round(reference, texts, labels, args.pipeline_batch_size))
                timings["server"].append(server_round(url, texts, labels, args))
        finally:
            stop_server(process)
        for way, seconds in timings.items():
            result[way] = summary(seconds, len(texts))
        result["speedup"] = round(result["server"]["items_per_s"] / result["pipeline"]["items_per_s"], 2)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
