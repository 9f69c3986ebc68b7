"""CUDA graphs over batches of same-shaped items: CLIP's images, all of one size once the frontend
has resized and cropped them. A ViT-B/32 forward launches some two hundred kernels, whether it
sees one image or sixty-four, and on a GPU the device process's launching is its whole cost.

One graph per bucket of the item count (`ITEM_BUCKETS` in cuda_graphs.py), up to the bucket where a
forward's arithmetic outweighs its launches; the capture, the check against the eager forward and
the fallback are cuda_graphs.py's. Items are independent through the whole forward (attention stays
within an image), so the bucket's spare items, which keep an earlier batch's inputs, touch no real row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from sie.gpu_proc.adapters.cuda_graphs import (
    FLOPS_PER_FORWARD,
    ITEM_BUCKETS,
    GraphCache,
    largest_within,
    may_replay,
    round_up,
    weak_body,
)

ItemBody = Callable[[torch.Tensor], torch.Tensor]


def items_bucket(items: int, most_items: int = ITEM_BUCKETS[-1]) -> int | None:
    """The item count a batch of `items` replays at, or None when it runs eagerly."""
    return round_up(items, ITEM_BUCKETS, most_items)


def most_items_for(flops_per_item: float) -> int:
    """The largest bucket a model of this many FLOPs per item replays (one item at least)."""
    return largest_within(ITEM_BUCKETS, flops_per_item, FLOPS_PER_FORWARD, ITEM_BUCKETS[0])


@dataclass(frozen=True, slots=True)
class _Items:
    batch: torch.Tensor  # [bucket items, ...]

    def fill(self, batch: torch.Tensor) -> None:
        self.batch[: batch.shape[0]].copy_(batch)  # items past the batch keep earlier, valid inputs

    def args(self) -> tuple[torch.Tensor]:
        return (self.batch,)


class ItemGraphs(GraphCache):
    """Replays of `body(batch) -> [items, ...]`, one graph per item bucket, shape and dtype."""

    def __init__(self, body: ItemBody, device: torch.device, most_items: int = ITEM_BUCKETS[-1]) -> None:
        super().__init__(body, device)
        self._most_items = most_items

    def run(self, batch: torch.Tensor) -> torch.Tensor | None:
        items = batch.shape[0]
        bucket = items_bucket(items, self._most_items)
        if bucket is None or self.failed:
            return None
        shape, dtype = (bucket, *batch.shape[1:]), batch.dtype
        return self._replay(
            (shape, dtype),
            (batch,),
            items,
            lambda: _Items(torch.zeros(shape, dtype=dtype, device=self._device)),
        )


class ItemReplays:
    """A model's item graphs: made at its first CUDA batch, never for a module kept off graphs."""

    def __init__(self, module: torch.nn.Module, body: ItemBody, flops_per_item: float) -> None:
        self._module: torch.nn.Module | None = module
        self._body: ItemBody | None = weak_body(body)
        self._most_items = most_items_for(flops_per_item)
        self.graphs: ItemGraphs | None = None

    def run(self, batch: torch.Tensor) -> torch.Tensor | None:
        """The body's output over `batch` from a graph; None where none applies (run it eagerly)."""
        if self._module is None or self._body is None:
            return None  # closed
        if not may_replay(batch.device, self.graphs, self._module):
            return None
        if self.graphs is None:
            self.graphs = ItemGraphs(self._body, batch.device, self._most_items)
        return self.graphs.run(batch)

    def close(self) -> None:
        """Drop the graphs (their memory pool) and the module at once, with the model."""
        self.graphs = self._module = self._body = None
