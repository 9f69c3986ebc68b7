"""The GPU kit's measurements in one run: models built, CUDA tests, raw forward vs sie over HTTP.

    python scripts/gpu/bench_gpu.py --out FILE [--cpu] [--seconds 6] [--clients 1,32,256]
                                    [--frontends N] [--work DIR] [--skip-tests]
                                    [--models minilm,qwen3] [--warmup-s 1] [--server-arg=--flag=value]

1. Builds random-weight models of real shapes (scripts/gpu/build_models.py; `--cpu`: tiny ones),
   one YAML per model and precision (float16 and bfloat16 on CUDA; float32 and bfloat16 on CPU).
2. Runs the tests marked `gpu` (skipped without CUDA) and keeps their summary.
3. For each model and precision: the raw batched forward in-process (scripts/gpu/raw_forward.py),
   then sie over HTTP (one server, every model preloaded): `--warmup-s` of unmeasured load at the
   most clients (CUDA graphs capture each batch shape on first use), then each client count, one item per
   request (10-40-word texts; 640x480 JPEGs for CLIP; for the reranker a query and 8 documents,
   items being pairs), with the GPU's busy share sampled from NVML while the clients run
   (`utilization.gpu`: the time a kernel was running).
4. Writes one JSON object to `--out`: per model, raw items/s and single-forward ms, and per
   client count sie's items/s, p50/p99 ms, GPU busy % and the server's own account from /metrics
   (`server`: mean ms per stage, items per batch, frontend CPU per request, device CPU per item;
   scripts/gpu/server_metrics.py); `vs_raw` is sie's items/s at the most clients over the raw
   forward's, `single_over_raw_ms` one client's p50 less the raw single.

The clients are scripts/bench.py's hand-written keep-alive HTTP clients in this process, so at
hundreds of clients their own CPU (`client_cpu_s`) may cap what they can ask for.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "scripts" / "gpu"), str(REPO)]

import msgpack  # noqa: E402
from _server import start_server, stop_server  # noqa: E402
from bench import make_texts, percentile, run_load  # noqa: E402
from build_models import build, default_tokenizer_dir  # noqa: E402
from raw_forward import measure_images, measure_score, measure_text, release_memory  # noqa: E402
from server_metrics import breakdown, delta, scrape  # noqa: E402

from sie.supervisor.children import frontend_count  # noqa: E402

PAIRS_PER_REQUEST = 8  # a reranker request: one query and eight documents


class GpuBusy:
    """NVML's `utilization.gpu` sampled every 50 ms while a block runs; None without NVML."""

    def __init__(self) -> None:
        self._nvml: Any = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            self._nvml = pynvml
            self.name = str(pynvml.nvmlDeviceGetName(self._handle))
        except Exception:  # no driver, no GPU: nothing to sample
            self.name = None

    def during(self, run: Any) -> tuple[Any, float | None]:
        if self._nvml is None:
            return run(), None
        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                samples.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            result = run()
        finally:
            stop.set()
            thread.join()
        return result, round(sum(samples) / len(samples), 1) if samples else None


def jpegs(n: int, size: tuple[int, int], seed: int = 0) -> list[bytes]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    made = []
    for _ in range(n):
        pixels = rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
        image = Image.fromarray(pixels).resize(size, Image.BILINEAR)  # smooth, so JPEG sizes are real
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        made.append(buffer.getvalue())
    return made


def run_tests(cpu: bool) -> dict[str, Any]:
    argv = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
            "tests/gpu_proc/test_cuda.py", "tests/gpu_proc/test_fake_adapter.py"]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    return {"returncode": done.returncode, "summary": lines[-1] if lines else done.stderr[-500:], "cpu": cpu}


def load(
    url: str, spec: dict[str, Any], bodies: list[bytes], fmt: str, clients: int, seconds: float
) -> dict[str, Any]:
    scoring = spec["kind"] == "score"
    args = argparse.Namespace(
        task="score" if scoring else "encode", model=spec["id"], format=fmt, requests=None,
        duration_s=seconds, warmup=2 * clients, scrape_every_s=None, client="raw", concurrency=clients,
        items_per_request=PAIRS_PER_REQUEST if scoring else 1,
    )  # fmt: skip
    started = time.process_time()
    stats, elapsed = asyncio.run(run_load(url, args, bodies))
    return {
        "items_per_s": round(sum(stats.items) / elapsed, 1),
        "p50_ms": round(percentile(stats.latencies_ms, 50), 2),
        "p99_ms": round(percentile(stats.latencies_ms, 99), 2),
        "errors": stats.errors,
        "client_cpu_s": round(time.process_time() - started, 2),
    }


def bodies_for(spec: dict[str, Any], texts: list[str], images: list[bytes]) -> tuple[list[bytes], str]:
    if spec["kind"] == "score":
        return [
            json.dumps({"query": {"text": query}, "items": [{"text": doc} for doc in docs]}).encode()
            for query, docs in _rerank_requests(texts)
        ], "json"
    if spec["kind"] == "image":
        return [
            msgpack.packb({"items": [{"images": [{"data": data}]}]}, use_bin_type=True) for data in images
        ], "msgpack"
    return [json.dumps({"items": [{"text": text}]}).encode() for text in texts], "json"


def _rerank_requests(texts: list[str]) -> list[tuple[str, list[str]]]:
    """One query (a text's first eight words) and the next eight texts as its documents, per request."""
    step = PAIRS_PER_REQUEST + 1
    starts = range(0, len(texts) - step + 1, step)
    return [(" ".join(texts[i].split()[:8]), texts[i + 1 : i + step]) for i in starts]


def _raw(spec: dict[str, Any], texts: list[str], images: list[bytes], device: str) -> dict[str, Any]:
    if spec["kind"] == "image":
        return measure_images(spec, images, device, 64)
    if spec["kind"] == "score":
        pairs = [(query, doc) for query, docs in _rerank_requests(texts) for doc in docs]
        return measure_score(spec, pairs, device, 32)
    return measure_text(spec, texts, device, 64)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true", help="tiny models on the CPU: the kit's rehearsal")
    parser.add_argument("--seconds", type=float, default=6.0, help="per model and client count")
    parser.add_argument("--clients", default="1,32,256")
    parser.add_argument("--frontends", type=int)
    parser.add_argument("--work", type=Path, help="where the models go (default: a temporary folder)")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument(
        "--server-arg", action="append", default=[], help="a flag for the server (--server-arg=--flag=value)"
    )
    parser.add_argument(
        "--models", help="only the models whose name holds one of these comma-separated parts (minilm,qwen3)"
    )
    parser.add_argument(
        "--warmup-s",
        type=float,
        default=1.0,
        help="load at the most clients before each model's measured runs, unmeasured: the batch shapes "
        "that CUDA graphs capture on first use are captured by then",
    )
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    cores = os.cpu_count() or 2
    frontends = frontend_count(args.frontends, [device], cores)  # the server's own default
    work = args.work or Path(tempfile.mkdtemp(prefix="sie-gpu-"))
    report: dict[str, Any] = {
        "device": device,
        "cores": cores,
        "frontends": frontends,
        "python": platform.python_version(),
    }
    report.update(_versions())
    started = time.monotonic()
    specs = build(work, args.cpu, device, default_tokenizer_dir())
    if args.models:
        parts = args.models.split(",")
        specs = [spec for spec in specs if any(part in spec["name"] for part in parts)]
    report["build_s"] = round(time.monotonic() - started, 1)
    print(f"built {len(specs)} models in {report['build_s']} s", flush=True)
    if not args.skip_tests:
        report["tests"] = run_tests(args.cpu)
        print(f"tests: {report['tests']['summary']}", flush=True)
    texts, source = make_texts(512 if args.cpu else 4096, 10, 40)
    images = jpegs(64 if args.cpu else 512, (160, 120) if args.cpu else (640, 480))
    report["texts"] = source
    busy = GpuBusy()
    report["gpu"] = busy.name
    report["models"] = specs
    for spec in specs:
        try:
            spec["raw"] = _raw(spec, texts, images, device)
        except Exception as error:  # one model's failure must not cost the others' figures
            spec["raw_error"] = repr(error)
        release_memory()
        print(f"raw {spec['id']}: {spec.get('raw') or spec.get('raw_error')}", flush=True)
        _write(args.out, report)
    extra = server_args(device, work / "models", [s["id"] for s in specs]) + args.server_arg
    report["server_args"] = args.server_arg
    process, url, _, log_path = start_server(frontends, extra, "gpukit")
    report["server_log"] = str(log_path)
    try:
        counts = [int(c) for c in args.clients.split(",")]
        for spec in specs:
            bodies, fmt = bodies_for(spec, texts, images)
            spec["sie"] = {}
            if args.warmup_s > 0:
                load(url, spec, bodies, fmt, max(counts), args.warmup_s)
            for clients in counts:
                run = functools.partial(load, url, spec, bodies, fmt, clients, args.seconds)
                before = scrape(url)
                result, gpu_busy = busy.during(run)
                result["gpu_busy_percent"] = gpu_busy
                result["server"] = breakdown(delta(before, scrape(url)), spec["id"])
                spec["sie"][str(clients)] = result
                print(f"sie {spec['id']} x{clients}: {result}", flush=True)
            _compare(spec)
            _write(args.out, report)
    finally:
        stop_server(process)
        shutil.copy(log_path, args.out.parent / "gpu-kit-server.log")  # it comes back with the JSON
        report.update(fallbacks(log_path))
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)  # a fresh temporary folder: the models go with it
    report["total_s"] = round(time.monotonic() - started, 1)
    _write(args.out, report)
    print(json.dumps(report))
    return 0


def server_args(device: str, models_dir: Path, preload: list[str]) -> list[str]:
    """`sie serve` flags for the kit's server: the device, the built models, all preloaded."""
    return ["--device", device, "--models-dir", str(models_dir), "--preload", ",".join(preload)]


def _write(out: Path, report: dict[str, Any]) -> None:
    """After every model, so a run cut short still brings back what it measured."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))


def _compare(spec: dict[str, Any]) -> None:
    if "raw" not in spec:
        return
    levels = sorted(spec["sie"], key=int)
    most, one = spec["sie"][levels[-1]], spec["sie"].get("1")
    spec["vs_raw"] = round(most["items_per_s"] / spec["raw"]["raw_items_per_s"], 3)
    if one is not None:
        spec["single_over_raw_ms"] = round(one["p50_ms"] - spec["raw"]["raw_single_ms"], 2)


def _versions() -> dict[str, Any]:
    import torch
    import transformers

    from sie.gpu_proc.adapters.varlen import Kernel

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cuda": torch.version.cuda,
        "varlen_kernel": Kernel.installed() is not None,  # torch.nn.attention.varlen in this PyTorch
    }


def fallbacks(log_path: Path) -> dict[str, int]:
    """From the server's log: how often its varlen attention fell back to padded groups
    (sie.gpu_proc.adapters.varlen), and how many models turned CUDA graphs off, by a failed
    capture or a replay the eager forward disagreed with (sie.gpu_proc.adapters.cuda_graphs)."""
    text = log_path.read_text(errors="replace")
    return {
        "varlen_failures": text.count("varlen attention failed"),
        "cuda_graph_failures": text.count("CUDA graph capture failed")
        + text.count("CUDA graph replay disagrees"),
    }


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
