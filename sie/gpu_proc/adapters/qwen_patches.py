"""Qwen2-VL's flat patch order, which Qwen3-VL and ColQwen2.5's vision towers read."""

from __future__ import annotations

import torch


def flat_patches(values: torch.Tensor, patch: int, merge: int, frames: int) -> torch.Tensor:
    """Normalized images [n, C, H, W] -> [n * rows * cols, C * frames * patch * patch], rows and
    columns of `patch`-pixel patches, merge x merge neighbours adjacent, a still image repeated
    over the tower's `frames`, as Qwen2VLImageProcessor lays them out."""
    n, channels, height, width = values.shape
    rows, cols = height // patch, width // patch
    grid = values.reshape(n, channels, rows // merge, merge, patch, cols // merge, merge, patch)
    grid = grid.permute(0, 2, 5, 3, 6, 1, 4, 7)  # n, rows/m, cols/m, m, m, channels, patch, patch
    grid = grid.unsqueeze(6).expand(*grid.shape[:6], frames, patch, patch)
    return grid.reshape(n * rows * cols, channels * frames * patch * patch)
