"""A CPU stand-in for PyTorch's CUDA varlen attention kernel (sie.gpu_proc.adapters.varlen), so
the packed forwards' varlen path runs in the CPU tests."""

from __future__ import annotations

import itertools
from typing import Any

import torch

FULL = (-1, -1)


def reference_kernel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    window_size: tuple[int, int] = FULL,
    enable_gqa: bool = False,
    **_: Any,
) -> torch.Tensor:
    """The kernel's contract (torch.nn.attention.varlen.varlen_attn's documentation) computed one
    sequence at a time by SDPA with an explicit band of allowed keys."""
    out = torch.empty_like(q)
    bounds = cu_seq_q.tolist()
    left, right = window_size
    for start, end in itertools.pairwise(bounds):
        rows = torch.arange(end - start)
        distance = rows[:, None] - rows[None, :]  # query minus key position
        allowed = torch.ones_like(distance, dtype=torch.bool)
        if left >= 0:
            allowed &= distance <= left
        if right >= 0:
            allowed &= -distance <= right
        block = [t[start:end].transpose(0, 1)[None] for t in (q, k, v)]
        attended = torch.nn.functional.scaled_dot_product_attention(
            *block, attn_mask=allowed, enable_gqa=enable_gqa
        )
        out[start:end] = attended[0].transpose(0, 1)
    return out
