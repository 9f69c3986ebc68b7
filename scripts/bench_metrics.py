"""What a `/metrics` scrape costs on a server with a catalog of many models, every series filled.

    python scripts/bench_metrics.py [--models 100] [--scrapes 50] [--page-out FILE]

It writes one tiny random BERT (1 layer, hidden 32, all-MiniLM-L6-v2's tokenizer) and a models
directory of `--models` YAML files serving it under as many ids, starts a server with one
frontend, loads every model with a request to it (so each has its request, stage, batch and load
series), adds a few errors, and then scrapes the page `--scrapes` times over one keep-alive
connection in each format. It reports the page size, the wall time a scrape takes as the scraper
sees it (median, p90), and the CPU the answering frontend spent per scrape (from /proc). Last, the
page's families are encoded again in-process by prometheus-client's text encoder, the cost of
writing the page alone.

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _server import cpu_by_role, server_pids, start_server, stop_server

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
LOAD_TIMEOUT_S = 300.0


def build_models(root: Path, n_models: int) -> tuple[Path, list[str]]:
    """One tiny model's weights and `n_models` YAML files naming them under different ids."""
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
    weights = root / "tiny"
    transformers.BertModel(config).save_pretrained(weights)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        shutil.copy(minilm / name, weights / name)
    models = root / "models"
    models.mkdir()
    ids = [f"bench/tiny-{i:03d}" for i in range(n_models)]
    for sie_id in ids:
        body = {
            "sie_id": sie_id,
            "weights": {"path": str(weights)},
            "tasks": {"encode": {"dense": {"dim": 32}}},
            "max_sequence_length": 128,
            "adapter": "dense",
        }
        (models / f"{sie_id.replace('/', '__')}.yaml").write_text(yaml.safe_dump(body))
    return models, ids


def fill(client: Any, ids: list[str]) -> None:
    """A served request per model (its first request starts the load), and a few error answers."""
    body = {"items": [{"text": "a few words to count"}, {"text": "and a second item"}]}
    waiting = set(ids)
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while waiting:
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(waiting)} models not loaded after {LOAD_TIMEOUT_S:.0f} s")
        for sie_id in sorted(waiting):
            status = client.post(f"/v1/encode/{sie_id}", json=body).status_code
            if status == 200:
                waiting.discard(sie_id)
            elif status != 503:
                raise SystemExit(f"{sie_id}: HTTP {status}")
        time.sleep(0.2)
    client.post("/v1/encode/bench/no-such-model", json=body)
    client.post(f"/v1/encode/{ids[0]}", json={"items": "not a list"})


def scrape_times(client: Any, accept: str, n: int, roles: dict[int, str]) -> dict[str, Any]:
    client.get("/metrics", headers={"accept": accept})  # warm: the first scrape starts NVML etc.
    times: list[float] = []
    before = cpu_by_role(roles)
    for _ in range(n):
        started = time.perf_counter()
        response = client.get("/metrics", headers={"accept": accept})
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
    spent = cpu_by_role(roles, since=before)
    times.sort()
    return {
        "page_bytes": len(response.content),
        "page_lines": response.content.count(b"\n"),
        "content_type": response.headers["content-type"],
        "median_ms": round(statistics.median(times) * 1e3, 2),
        "p90_ms": round(times[int(0.9 * (n - 1))] * 1e3, 2),
        "frontend_cpu_ms_per_scrape": round(spent.get("frontend", 0.0) / n * 1e3, 2),
        "page": response.text,
    }


def encode_in_process(page: str, n: int) -> dict[str, float]:
    """prometheus-client's text encoder on the page's own families (parsed back), `n` times."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(page))

    class Families:
        def collect(self) -> list[Any]:
            return families

    times = []
    for _ in range(n):
        started = time.perf_counter()
        generate_latest(Families())  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    return {"generate_latest_median_ms": round(statistics.median(times) * 1e3, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--page-out", type=Path, help="write the last text page here")
    args = parser.parse_args(argv)
    import httpx

    report: dict[str, Any] = {"models": args.models, "scrapes": args.scrapes}
    with tempfile.TemporaryDirectory() as tmp:
        models_dir, ids = build_models(Path(tmp), args.models)
        process, url, _, log_path = start_server(1, ["--models-dir", str(models_dir)], "metrics")
        try:
            with httpx.Client(base_url=url, timeout=60) as client:
                started = time.monotonic()
                fill(client, ids)
                report["fill_s"] = round(time.monotonic() - started, 1)
                roles = server_pids(process.pid)
                for name, accept in (("text", "text/plain"), ("openmetrics", OPENMETRICS)):
                    report[name] = scrape_times(client, accept, args.scrapes, roles)
                    print(f"{name}: { {k: v for k, v in report[name].items() if k != 'page'} }", flush=True)
        finally:
            stop_server(process)
    report["in_process"] = encode_in_process(report["text"]["page"], args.scrapes)
    if args.page_out:
        args.page_out.write_text(report["text"]["page"])
    for name in ("text", "openmetrics"):
        del report[name]["page"]
    report["server_log"] = str(log_path)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
