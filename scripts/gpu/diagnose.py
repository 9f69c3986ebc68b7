"""Where sie's time goes on a lent machine, in one short call beside the kit's figures.

    python scripts/gpu/diagnose.py --out DIR [--cpu] [--seconds 4]

1. The machine's own speed: microseconds per CUDA kernel launch (5,000 tiny adds, synchronised
   once) and nanoseconds per pure-Python loop step, so its figures can be set against another
   box's; and whether this PyTorch has the varlen attention kernel the packed forwards use.
2. One server with `sie-fake` (no forward: the HTTP, frontend and ring ceiling) and MiniLM-L6's
   shape in float16 (bfloat16 on CPU), each under load for `--seconds`, with /metrics read
   before and after: batch sizes, forward seconds, per-stage request seconds, CPU per process.
3. py-spy (when installed) samples every sie process while MiniLM is under load: collapsed stacks
   per process in DIR/pyspy.txt, to read with any flame-graph tool or grep.

DIR gets diagnose.json (the probes, each run's items/s, p50, p99 and /metrics deltas, and how
often the server's varlen attention fell back to padded groups), diagnose-server.log and pyspy.txt.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "scripts" / "gpu"), str(REPO)]

from _server import start_server, stop_server  # noqa: E402
from bench import make_texts  # noqa: E402
from bench_gpu import GpuBusy, bodies_for, fallbacks, load, server_args  # noqa: E402
from build_models import _yamls, build_text, default_tokenizer_dir, text_models  # noqa: E402
from server_metrics import delta, scrape  # noqa: E402

from sie.supervisor.children import frontend_count  # noqa: E402


def launch_probe(device: str) -> dict[str, float]:
    import torch

    loop_started = time.perf_counter()
    total = 0
    for step in range(1_000_000):
        total += step
    loop_s = time.perf_counter() - loop_started
    probe: dict[str, float] = {"python_loop_step_ns": round(loop_s * 1e3, 1)}
    x = torch.zeros(16, device=device)
    for _ in range(100):
        x.add_(1)
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(5000):
        x.add_(1)
    if device == "cuda":
        torch.cuda.synchronize()
    probe["kernel_launch_us"] = round((time.perf_counter() - started) / 5000 * 1e6, 2)
    from sie.gpu_proc.adapters.varlen import Kernel

    probe["varlen_kernel"] = Kernel.installed() is not None
    return probe


def sample_stacks(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    spy = shutil.which("py-spy")
    if spy is None:
        return None
    argv = [spy, "record", "--subprocesses", "--nonblocking", "--format", "raw", "--rate", "200",
            "--duration", str(int(seconds)), "--pid", str(pid), "--output", str(out)]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    device = "cpu" if args.cpu else "cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"device": device, "probe": launch_probe(device)}
    print(f"probe: {report['probe']}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="sie-diagnose-"))
    spec = text_models(args.cpu)["minilm-l6"]
    (work / "models").mkdir()
    shutil.copy(
        REPO / "sie" / "models" / "sie-fake.yaml", work / "models"
    )  # --models-dir replaces the built-ins
    dim = build_text(work / "minilm-l6", spec, default_tokenizer_dir(), device)
    precision = "bfloat16" if args.cpu else "float16"
    runtime = {"pooling": spec["pooling"], "normalize": True}
    (minilm,) = _yamls(work / "models", "minilm-l6", work / "minilm-l6", "dense", dim, spec["max_length"],
                       runtime, [precision], "text")  # fmt: skip
    texts, _ = make_texts(2048, 10, 40)
    fake = {"id": "sie-fake", "kind": "text"}
    extra = server_args(device, work / "models", [minilm["id"], "sie-fake"])
    frontends = frontend_count(None, [device], os.cpu_count() or 2)  # the default
    process, url, _, log_path = start_server(frontends, extra, "diagnose")
    busy = GpuBusy()
    runs: list[dict[str, Any]] = []
    try:
        for model, clients in ((fake, 64), (minilm, 1), (minilm, 32)):
            bodies, fmt = bodies_for(model, texts, [])
            before = scrape(url)
            spy = None
            if model is minilm and clients > 1:
                spy = sample_stacks(process.pid, args.seconds, args.out / "pyspy.txt")
            result, gpu_busy = busy.during(
                functools.partial(load, url, model, bodies, fmt, clients, args.seconds)
            )
            after = scrape(url)
            if spy is not None:
                spy.wait(60)
            run = {"model": model["id"], "clients": clients, **result, "gpu_busy_percent": gpu_busy,
                   "metrics_delta": delta(before, after)}  # fmt: skip
            runs.append(run)
            print(json.dumps(run), flush=True)
    finally:
        stop_server(process)
        shutil.copy(log_path, args.out / "diagnose-server.log")
        report.update(fallbacks(log_path))
        shutil.rmtree(work, ignore_errors=True)
    report["runs"] = runs
    (args.out / "diagnose.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
