"""What CUDA graphs would save a launch-bound encoder: eager forward against graph replay.

    python scripts/gpu/bench_cuda_graphs.py [--out FILE] [--cpu]

For MiniLM-L6 and bge-base shapes (random weights, float16 on CUDA), each fixed batch shape
(rows x tokens, every row full so no mask is needed) is timed as an eager transformers forward and
as a replay of the same forward captured once into a CUDA graph. The gap is the kernel launches a
graph replaces with one: the ceiling of what graph capture over bucketed batch shapes could give
sie's device process on a GPU whose launches cost microseconds each. `--cpu` only checks that the
script runs (float32, eager twice, no graph).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_models import BGE_BASE, MINILM_L6

SHAPES = ((1, 32), (8, 32), (32, 32), (64, 32), (64, 128))
REPEATS = 50


def _model(shape: dict[str, int], device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    config = transformers.BertConfig(**shape, attn_implementation="sdpa")
    return transformers.BertModel(config, add_pooling_layer=False).to(device, dtype).eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(step: Any, device: torch.device, repeats: int) -> float:
    """Milliseconds per call of `step`, synchronised, after three warm-up calls."""
    for _ in range(3):
        step()
    _sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    _sync(device)
    return (time.perf_counter() - start) * 1e3 / repeats


def command_line(doc: str | None) -> tuple[Path | None, torch.device, torch.dtype, int]:
    """`--out FILE` and `--cpu`: where the JSON goes, the device, its dtype and repeats per timing."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.enable_cudnn_sdp(False)  # as sie's device does
    if torch.cuda.is_available() and not args.cpu:
        return args.out, torch.device("cuda"), torch.float16, REPEATS
    return args.out, torch.device("cpu"), torch.float32, 2


def write_rows(out: Path | None, device: torch.device, rows: list[dict[str, Any]]) -> None:
    if out is not None:
        out.write_text(
            json.dumps({"device": str(device), "torch": torch.__version__, "rows": rows}, indent=1)
        )


def _graphed(model: torch.nn.Module, ids: torch.Tensor) -> Any:
    """A replay function for the forward over `ids`' shape, captured on a side stream."""
    static_ids = ids.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm the allocator and kernels outside the capture
            model(input_ids=static_ids)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(input_ids=static_ids)
    return graph.replay


def measure(
    name: str, shape: dict[str, int], device: torch.device, dtype: torch.dtype, repeats: int
) -> list[dict[str, Any]]:
    model = _model(shape, device, dtype)
    rows = []
    with torch.inference_mode():
        for batch, tokens in SHAPES:
            ids = torch.randint(1000, 20000, (batch, tokens), device=device)
            eager = time_ms(lambda ids=ids: model(input_ids=ids), device, repeats)
            row: dict[str, Any] = {
                "model": name,
                "rows": batch,
                "tokens": tokens,
                "eager_ms": round(eager, 3),
            }
            if device.type == "cuda":
                try:
                    replay = _graphed(model, ids)
                    row["graph_ms"] = round(time_ms(replay, device, repeats), 3)
                    row["speedup"] = round(eager / row["graph_ms"], 2)
                except Exception as error:  # a capture this transformers can't do is a finding too
                    row["graph_error"] = f"{type(error).__name__}: {error}"[:300]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> int:
    out, device, dtype, repeats = command_line(__doc__)
    rows = [
        *measure("all-MiniLM-L6-v2", MINILM_L6, device, dtype, repeats),
        *measure("bge-base-en-v1.5", BGE_BASE, device, dtype, repeats),
    ]
    write_rows(out, device, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
