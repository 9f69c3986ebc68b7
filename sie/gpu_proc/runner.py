"""Flat token ids of a batch -> padded tensors on the device -> adapter -> float32 result rows."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from sie.gpu_proc.adapters.base import Adapter
    from sie.gpu_proc.batcher import Batch, PendingItem


# A batch is split into length runs when padding would waste more than this share of the padded
# tokens, but never into pieces smaller than MIN_CHUNK_TOKENS: below that, the fixed cost of one
# more forward pass outweighs the padding saved. Measured on a 2-core CPU with MiniLM, a forward
# pass costs about as much as 64 padded tokens; on a GPU small forwards are launch-bound, so only
# very large batches are worth splitting.
MAX_PADDING_WASTE = 0.15
MIN_CHUNK_TOKENS = {"cpu": 256, "cuda": 16384}


class Runner:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        # On CUDA, pinned (page-locked) staging makes the host->device copies truly asynchronous, so
        # the copies and the forward pass queue up on the stream without blocking this thread.
        self._is_cuda = device.type == "cuda"
        self._min_chunk_tokens = MIN_CHUNK_TOKENS.get(device.type, MIN_CHUNK_TOKENS["cpu"])

    def run_dense(self, adapter: Adapter, batch: Batch) -> np.ndarray:
        """float32 [len(batch.items), dim]; row i belongs to batch.items[i]."""
        lengths = [len(item.input_ids) for item in batch.items]
        rows = [
            self._forward(adapter, batch.items[chunk])
            for chunk in split_by_padding(lengths, MAX_PADDING_WASTE, self._min_chunk_tokens)
        ]
        return rows[0] if len(rows) == 1 else np.concatenate(rows)

    def _forward(self, adapter: Adapter, items: list[PendingItem]) -> np.ndarray:
        input_ids, attention_mask, token_type_ids = pad_items(items, adapter.pad_token_id)
        types = None if token_type_ids is None else self._to_device(token_type_ids)
        pooled = adapter.forward_dense(self._to_device(input_ids), self._to_device(attention_mask), types)
        return pooled.float().cpu().numpy()

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        if not self._is_cuda:
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)


def split_by_padding(lengths: list[int], max_waste: float, min_chunk_tokens: int) -> list[slice]:
    """Cut length-sorted items into runs whose padding waste stays under `max_waste`.

    A run is closed before an item that would push its waste over the limit, provided the run
    already holds `min_chunk_tokens` padded tokens.
    """
    chunks: list[slice] = []
    start, real = 0, 0
    for i, length in enumerate(lengths):
        size = i - start
        too_wasteful = real + length < (1 - max_waste) * (size + 1) * length
        if size and too_wasteful and size * lengths[i - 1] >= min_chunk_tokens:
            chunks.append(slice(start, i))
            start, real = i, 0
        real += length
    chunks.append(slice(start, len(lengths)))
    return chunks


def pad_items(
    items: list[PendingItem], pad_token_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Right-padded int64 input_ids and attention_mask, plus token_type_ids if any item has them.

    One boolean mask scatters all items' flat ids at once; there is always at least one item.
    """
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
