"""torch's own CPU linear layers (MKL on x86) against oneDNN's, in process: what `--cpu-linear`
chooses between (sie.gpu_proc.cpu_linear).

    python scripts/bench_cpu_linear.py [--threads 1 2] [--tokens 864] [--batch 64] [--length 27]

1. One linear layer of MiniLM's shapes (tokens x 384 -> 1536, 1536 -> 384, 384 -> 384), GFLOP/s
   of each way, fastest of several calls, per thread count.
2. The same layer with a fresh token count on every call (300 calls, 50-2,000 tokens): whether
   oneDNN creating kernels per shape eats its gain.
3. A whole MiniLM-shaped BERT forward (6 layers, hidden 384, random weights; transformers), items/s
   with torch's linear layers and with them swapped to oneDNN, and the largest output difference.

The probe a CPU device runs at start is printed too (`probe_speedup`).
"""

from __future__ import annotations

import argparse
import copy
import functools
import random
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from sie.gpu_proc.cpu_linear import OneDnnLinear, probe_speedup, swap_linears

HIDDEN, INTERMEDIATE = 384, 1536


def fastest_s(call: Callable[[], object], runs: int = 20) -> float:
    for _ in range(3):
        call()
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def layer_gflops(tokens: int) -> None:
    for n_in, n_out in ((HIDDEN, INTERMEDIATE), (INTERMEDIATE, HIDDEN), (HIDDEN, HIDDEN)):
        torch_layer = torch.nn.Linear(n_in, n_out)
        onednn_layer = copy.deepcopy(torch_layer)
        swap_linears([onednn_layer])
        x = torch.randn(tokens, n_in)
        flops = 2 * tokens * n_in * n_out
        with torch.inference_mode():
            mkl = flops / fastest_s(functools.partial(torch_layer, x)) / 1e9
            onednn = flops / fastest_s(functools.partial(onednn_layer, x)) / 1e9
        shape = f"{tokens}x{n_in}->{n_out}"
        print(f"  layer {shape}: torch {mkl:.0f} GFLOP/s, oneDNN {onednn:.0f} ({onednn / mkl:.2f}x)")


def fresh_shapes() -> None:
    rng = random.Random(0)
    weight, bias = torch.randn(INTERMEDIATE, HIDDEN), torch.randn(INTERMEDIATE)
    inputs = [torch.randn(rng.randint(50, 2000), HIDDEN) for _ in range(300)]
    layer = OneDnnLinear(HIDDEN, INTERMEDIATE)
    layer.weight.data, layer.bias.data = weight, bias
    with torch.inference_mode():
        started = time.perf_counter()
        for x in inputs:
            F.linear(x, weight, bias)
        mkl = time.perf_counter() - started
        started = time.perf_counter()
        for x in inputs:
            layer(x)
        onednn = time.perf_counter() - started
    print(f"  300 fresh shapes: torch {mkl * 1e3:.0f} ms, oneDNN {onednn * 1e3:.0f} ms ({mkl / onednn:.2f}x)")


def minilm_shaped_bert() -> torch.nn.Module:
    """A BERT of MiniLM-L6's shapes (6 layers, hidden 384) with random weights, in eval mode."""
    import transformers

    config = transformers.BertConfig(
        hidden_size=HIDDEN, num_hidden_layers=6, num_attention_heads=12, intermediate_size=INTERMEDIATE
    )
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def whole_forward(batch: int, length: int) -> None:
    plain = minilm_shaped_bert()
    swapped = copy.deepcopy(plain)
    swap_linears([swapped])
    ids = torch.randint(1000, 20000, (batch, length))
    with torch.inference_mode():
        want = plain(input_ids=ids).last_hidden_state
        got = swapped(input_ids=ids).last_hidden_state
        mkl = batch / fastest_s(lambda: plain(input_ids=ids), runs=10)
        onednn = batch / fastest_s(lambda: swapped(input_ids=ids), runs=10)
    diff = (want - got).abs().max().item()
    print(
        f"  MiniLM-shaped forward, {batch} x {length} tokens: torch {mkl:.0f} items/s, "
        f"oneDNN {onednn:.0f} ({onednn / mkl:.2f}x), largest difference {diff:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=864, help="tokens of the one-layer measure")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=27)
    args = parser.parse_args()
    speedup = probe_speedup()
    print(f"start-up probe: oneDNN {speedup:.2f}x torch" if speedup else "start-up probe: no oneDNN")
    if speedup is None:
        return
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"{threads} thread(s):")
        layer_gflops(args.tokens)
        fresh_shapes()
        whole_forward(args.batch, args.length)


if __name__ == "__main__":
    main()
