"""Pooling of per-token hidden states into one vector per item; the one copy every adapter uses.

Masks are right-padded (the runner pads that way): real tokens first, then zeros.
Pooling runs in float32 whatever the model's dtype, since a float16 sum over hundreds of tokens
loses precision that the frontend's normalization cannot give back.
"""

from __future__ import annotations

from typing import Literal

import torch

Pooling = Literal["cls", "mean", "last"]


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: Pooling) -> torch.Tensor:
    """[n, L, d] hidden states and [n, L] mask -> float32 [n, d]."""
    if mode == "cls":
        return hidden[:, 0].float()
    if mode == "mean":
        return mean_pool(hidden, attention_mask)
    if mode == "last":
        return last_token_pool(hidden, attention_mask)
    raise ValueError(f"unknown pooling {mode!r}; expected cls, mean or last")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    mask = attention_mask.unsqueeze(-1).to(torch.float32)
    summed = (hidden.float() * mask).sum(dim=1)
    return summed / mask.sum(dim=1).clamp(min=1.0)


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    last = (attention_mask.sum(dim=1) - 1).clamp(min=0)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    return hidden[rows, last].float()
