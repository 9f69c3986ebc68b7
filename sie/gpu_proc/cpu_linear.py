"""Linear layers of a CPU device's models through oneDNN, where this CPU runs them faster.

torch's CPU build sends a float32 `nn.Linear` to MKL's sgemm. On AMD CPUs MKL takes its AVX2 path
even where the CPU has AVX-512, while oneDNN (also inside torch) uses AVX-512. On the 2-core AMD
EPYC box of docs/performance.md that made MiniLM's GEMMs 2.2-2.7x faster and a whole MiniLM
forward 1.7x, with the same results to float32 rounding. Where MKL is as fast (Intel CPUs),
nothing should change, so `auto` times both at start and takes oneDNN only when it is clearly
ahead. Layers swap class, not weights: LoRA, tied and reloaded weights are read as they are at
each call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from sie.gpu_proc.threads import modules_of

if TYPE_CHECKING:
    from sie.gpu_proc.adapters.base import AdapterLoader

log = logging.getLogger(__name__)

CHOICES = ("auto", "onednn", "torch")
# oneDNN must beat MKL by this much in the probe: a small win is not worth a second GEMM library.
MIN_SPEEDUP = 1.25
_PROBE_SHAPE = (256, 384, 1536)  # tokens x in x out: a MiniLM-sized feed-forward layer


def _onednn_dtypes() -> tuple[torch.dtype, ...]:
    # oneDNN has no bfloat16 inner product on CPUs without AVX-512 (it raises, it does not fall back).
    try:
        has_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        has_bf16 = False
    return (torch.float32, torch.bfloat16) if has_bf16 else (torch.float32,)


_ONEDNN_DTYPES = _onednn_dtypes()


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class OneDnnLinear(torch.nn.Linear):
    """An `nn.Linear` whose float32 CPU forwards (and bfloat16 ones where the CPU has oneDNN's
    bfloat16) run on oneDNN; anything else (other dtypes, a 1-d input, autograd) runs as
    `nn.Linear` does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if (
            x.dtype in _ONEDNN_DTYPES
            and x.dtype == weight.dtype
            and x.dim() >= 2
            and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
        ):
            return _onednn_linear(x, weight, self.bias)
        return F.linear(x, weight, self.bias)


def swap_linears(modules: list[torch.nn.Module]) -> int:
    """Make every plain `nn.Linear` inside `modules` a OneDnnLinear; how many were swapped.

    Subclasses (a LoRA wrapper, a quantized layer) keep their own forward.
    """
    swapped = 0
    for module in modules:
        for layer in module.modules():
            if type(layer) is torch.nn.Linear:
                layer.__class__ = OneDnnLinear  # same fields, another forward
                swapped += 1
    return swapped


def with_onednn_linears(load: AdapterLoader) -> AdapterLoader:
    """`load`, with the loaded adapter's linear layers swapped to OneDnnLinear."""

    def load_swapped(*args: Any) -> Any:
        adapter = load(*args)
        swap_linears(modules_of(adapter))
        return adapter

    return load_swapped


def onednn_wanted(choice: str, probe: Callable[[], float | None] | None = None) -> bool:
    """Whether this process's CPU models should take oneDNN linear layers (`choice`: CHOICES)."""
    if choice not in CHOICES:
        raise ValueError(f"unknown CPU linear backend {choice!r} (expected one of {', '.join(CHOICES)})")
    if choice == "torch":
        return False
    speedup = (probe or probe_speedup)()
    if speedup is None:
        if choice == "onednn":
            log.warning("oneDNN linear layers are not available in this torch build; using torch's own")
        return False
    if choice == "onednn":
        return True
    chosen = speedup >= MIN_SPEEDUP
    log.info(
        "CPU linear layers",
        extra={"backend": "onednn" if chosen else "torch", "onednn_speedup": round(speedup, 2)},
    )
    return chosen


def probe_speedup() -> float | None:
    """MKL's time over oneDNN's for one linear layer on one thread; None when oneDNN is missing
    or disagrees with `F.linear` beyond float32 rounding."""
    tokens, width, out = _PROBE_SHAPE
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the cores' other users (frontends) should not decide the choice
    try:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(tokens, width, generator=generator)
        weight = torch.randn(out, width, generator=generator) / width**0.5
        bias = torch.randn(out, generator=generator)
        with torch.inference_mode():
            expected = F.linear(x, weight, bias)
            try:
                got = _onednn_linear(x, weight, bias)
            except (RuntimeError, AttributeError, NotImplementedError):
                return None
            if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
                return None
            return _fastest_s(F.linear, x, weight, bias) / _fastest_s(_onednn_linear, x, weight, bias)
    finally:
        torch.set_num_threads(threads)


def _fastest_s(linear: Callable[..., Any], *args: torch.Tensor, runs: int = 5) -> float:
    linear(*args)  # warm: first calls allocate and create kernels
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        linear(*args)
        best = min(best, time.perf_counter() - started)
    return best
