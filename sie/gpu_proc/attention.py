"""Which attention implementation models load with (`SIE_ATTENTION_BACKEND`), falling back as SIE does.

`auto` takes flash_attention_2 on CUDA in half precision when the `flash_attn` package is there,
else SDPA. An explicit choice the box cannot honour (flash_attention_2 without CUDA, without half
precision or without `flash_attn`) falls back to SDPA with a warning, and a model whose
architecture lacks the chosen kernel loads with the next one down (flash -> sdpa -> eager).
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)

BACKENDS = ("flash_attention_2", "sdpa", "eager")
_HALF = (torch.float16, torch.bfloat16)


class AttentionChoice:
    """The process's setting: one per device process, set once at start (sie.gpu_proc.main)."""

    requested = "auto"


def configure_attention(requested: str) -> None:
    if requested != "auto" and requested not in BACKENDS:
        raise ValueError(f"unknown attention backend {requested!r}")
    AttentionChoice.requested = requested
    # PyTorch's SDPA picks cuDNN first on Hopper, and cuDNN builds a graph for every new shape:
    # about 40 ms each on an H200, and a server's batches change shape all the time (lengths and
    # sizes). Flash and memory-efficient attention take any shape at no such cost.
    torch.backends.cuda.enable_cudnn_sdp(False)


def flash_available() -> bool:
    try:
        from transformers.utils import is_flash_attn_2_available
    except ImportError:
        return False
    return bool(is_flash_attn_2_available())


def resolve(requested: str, dtype: torch.dtype, on_cuda: bool) -> str:
    flash_ok = on_cuda and dtype in _HALF and flash_available()
    if requested == "auto":
        return "flash_attention_2" if flash_ok else "sdpa"
    if requested == "flash_attention_2" and not flash_ok:
        log.warning("flash_attention_2 needs CUDA, half precision and flash_attn; using sdpa")
        return "sdpa"
    return requested


def candidates(dtype: torch.dtype, on_cuda: bool) -> list[str | None]:
    """Implementations to try in order; None is the architecture's own default."""
    first = resolve(AttentionChoice.requested, dtype, on_cuda)
    return [*BACKENDS[BACKENDS.index(first) :], None]
