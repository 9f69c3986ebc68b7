"""Variable-length attention for the packed forwards on CUDA: one kernel call per layer.

PyTorch's flash varlen kernel (`torch.nn.attention.varlen.varlen_attn`) attends each sequence of a
packed `[tokens, heads, head_dim]` stream within its own bounds, given the sequences' cumulative
offsets. A layer then needs no gather into padded blocks and no scatter back: on a GPU, where a
small model's forward is bound by kernel launches, that is a handful of launches per layer fewer.

It is used where it applies: CUDA, half precision, a head size flash takes, no key mask. Elsewhere
the packed forwards attend in padded groups (sie.gpu_proc.adapters.packed), and they do so for the
rest of the process if the kernel ever fails (an older PyTorch's signature, an unsupported GPU).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from sie.gpu_proc.transfer import to_device

log = logging.getLogger(__name__)

_HALF = (torch.float16, torch.bfloat16)
FULL = (-1, -1)  # window_size: every key of the sequence
CAUSAL = (-1, 0)  # every earlier key and the token itself


def _installed_kernel() -> Callable[..., torch.Tensor] | None:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # PyTorch before 2.9
        return None
    return varlen_attn


class Kernel:
    """The process's varlen kernel, looked up on first use on a device it serves: importing it costs
    about 2 s (it brings torch._dynamo), which a CPU process never needs. The CPU tests put a
    stand-in here, with `anywhere` set so that it also runs on the CPU and in float32."""

    attend: Callable[..., torch.Tensor] | None = None
    looked_up = False
    anywhere = False
    failed = False

    @classmethod
    def installed(cls) -> Callable[..., torch.Tensor] | None:
        if cls.attend is None and not cls.looked_up:
            cls.attend = _installed_kernel()
        cls.looked_up = True
        return cls.attend


@functools.cache
def _takes_gqa_flag(kernel: Callable[..., torch.Tensor]) -> bool:
    """Whether `kernel` takes `enable_gqa`: PyTorch 2.11's does not (its flash kernel attends
    grouped key heads as they are), later ones ask for it."""
    try:
        parameters = inspect.signature(kernel).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "enable_gqa" or p.kind is p.VAR_KEYWORD for p in parameters)


@dataclass(frozen=True, slots=True)
class Sequences:
    """Where each sequence of a packed stream starts, as the kernel takes it."""

    offsets: torch.Tensor  # int32 [n + 1]: 0, then each sequence's end
    longest: int


def sequences(
    lengths: list[int], device: torch.device, dtype: torch.dtype, head_dim: int
) -> Sequences | None:
    """The batch's offsets on `device` when the kernel applies to it, else None."""
    if Kernel.failed:
        return None
    if not Kernel.anywhere and (device.type != "cuda" or dtype not in _HALF):
        return None
    if head_dim % 8 or head_dim > 256 or Kernel.installed() is None:  # flash's head sizes
        return None
    (offsets,) = to_device([np.asarray([0, *itertools.accumulate(lengths)], np.int64)], device)
    return Sequences(offsets.to(torch.int32), max(lengths))


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqs: Sequences, window: tuple[int, int]
) -> torch.Tensor | None:
    """`[tokens, heads, head_dim]` outputs of every sequence attending within itself, keys from
    `window` = (left, right) positions around each query (-1: unbounded); None if the kernel failed,
    and then it is not tried again."""
    kernel = Kernel.installed()
    if kernel is None or Kernel.failed:
        return None
    grouped = {"enable_gqa": True} if q.shape[1] != k.shape[1] and _takes_gqa_flag(kernel) else {}
    try:
        out = kernel(
            q, k, v, seqs.offsets, seqs.offsets, seqs.longest, seqs.longest, window_size=window, **grouped
        )  # fmt: skip
        out = out[0] if isinstance(out, tuple) else out  # a version that returns the logsumexp too
        if not isinstance(out, torch.Tensor) or out.shape != q.shape:
            raise TypeError(f"varlen_attn returned {type(out).__name__} {getattr(out, 'shape', '')}")
    except torch.OutOfMemoryError:
        raise  # the batch's own failure: the device splits or refuses it, as for any forward
    except Exception as exc:  # any other failure: padded groups from now on
        Kernel.failed = True
        log.warning("varlen attention failed; attending in padded groups", extra={"error": repr(exc)})
        return None
    return out
