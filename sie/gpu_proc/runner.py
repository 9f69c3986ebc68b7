"""Flat token ids of a batch -> padded tensors on the device -> adapter -> float32 result rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from sie.gpu_proc.adapters.base import Adapter
    from sie.gpu_proc.batcher import Batch


class Runner:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        # On CUDA, pinned (page-locked) staging makes the host->device copies truly asynchronous, so
        # the copies and the forward pass queue up on the stream without blocking this thread.
        self._is_cuda = device.type == "cuda"

    def run_dense(self, adapter: Adapter, batch: Batch) -> np.ndarray:
        """float32 [len(batch.items), dim]; row i belongs to batch.items[i]."""
        input_ids, attention_mask, token_type_ids = pad_batch(batch, adapter.pad_token_id)
        types = None if token_type_ids is None else self._to_device(token_type_ids)
        pooled = adapter.forward_dense(self._to_device(input_ids), self._to_device(attention_mask), types)
        return pooled.float().cpu().numpy()

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        if not self._is_cuda:
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)


def pad_batch(batch: Batch, pad_token_id: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Right-padded int64 input_ids and attention_mask, plus token_type_ids if any item has them.

    One boolean mask scatters all items' flat ids at once; a batch always has at least one item.
    """
    items = batch.items
    lengths = np.fromiter((len(item.input_ids) for item in items), np.int64, len(items))
    mask = np.arange(lengths.max()) < lengths[:, None]
    input_ids = np.full(mask.shape, pad_token_id, np.int64)
    input_ids[mask] = np.concatenate([item.input_ids for item in items])
    token_type_ids = None
    if any(item.token_type_ids is not None for item in items):
        token_type_ids = np.zeros(mask.shape, np.int64)
        token_type_ids[mask] = np.concatenate([_types(item.input_ids, item.token_type_ids) for item in items])
    return input_ids, mask.astype(np.int64), token_type_ids


def _types(input_ids: np.ndarray, token_type_ids: np.ndarray | None) -> np.ndarray:
    return np.zeros(len(input_ids), np.int8) if token_type_ids is None else token_type_ids
