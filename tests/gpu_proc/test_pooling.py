"""Pooling over right-padded hidden states, checked on hand-made tensors."""

from __future__ import annotations

import pytest
import torch

from sie.gpu_proc.adapters.pooling import pool

# Two items: the first 3 tokens long, the second 1 token long (then padding full of junk).
HIDDEN = torch.tensor(
    [
        [[1.0, 2.0], [3.0, 4.0], [5.0, 9.0], [7.0, 7.0]],
        [[2.0, -2.0], [99.0, 99.0], [99.0, 99.0], [99.0, 99.0]],
    ]
)
MASK = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("cls", [[1.0, 2.0], [2.0, -2.0]]),
        ("mean", [[3.0, 5.0], [2.0, -2.0]]),
        ("last", [[5.0, 9.0], [2.0, -2.0]]),
    ],
)
def test_pooling_ignores_padding(mode: str, expected: list[list[float]]) -> None:
    pooled = pool(HIDDEN, MASK, mode)  # type: ignore[arg-type]
    assert pooled.dtype == torch.float32
    assert pooled.tolist() == expected


def test_half_precision_states_pool_in_float32() -> None:
    pooled = pool(HIDDEN.half(), MASK, "mean")
    assert pooled.dtype == torch.float32 and pooled.tolist() == [[3.0, 5.0], [2.0, -2.0]]


def test_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(HIDDEN, MASK, "max")  # type: ignore[arg-type]
