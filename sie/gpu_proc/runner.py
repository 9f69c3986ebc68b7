"""Flat token ids of a batch -> padded tensors on the device -> adapter -> result arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.media import is_media, run_media
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.padding import pad_items
from sie.gpu_proc.threads import ThreadPolicy
from sie.gpu_proc.transfer import to_device
from sie.shm.layout import ResultKind, kinds_of

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
    def __init__(self, device: torch.device, threads: ThreadPolicy | None = None) -> None:
        self.device = device
        self._threads = threads  # CPU only: intra-op threads chosen per batch
        self._min_chunk_tokens = MIN_CHUNK_TOKENS.get(device.type, MIN_CHUNK_TOKENS["cpu"])

    def run(self, adapter: Adapter, batch: Batch, sharing: int = 1) -> dict[ResultKind, Output]:
        """Every kind the batch asked for; row i of each belongs to batch.items[i].

        `sharing`: the forwards this process runs at once, this one included (CPU: each gets its
        share of the cores)."""
        if self._threads is not None:
            self._threads.choose(adapter, *_work(batch), sharing=sharing)
        return self._run(adapter, batch)

    def is_light(self, adapter: Adapter, batch: Batch) -> bool:
        """A CPU forward of a few milliseconds of one core at most (see sie.gpu_proc.threads)."""
        return self._threads is not None and self._threads.is_light(adapter, *_work(batch))

    def _run(self, adapter: Adapter, batch: Batch) -> dict[ResultKind, Output]:
        if is_media(batch):  # images or audio windows: one forward, see sie.gpu_proc.media
            return run_media(adapter, batch, self._to_device)
        wanted = frozenset(kinds_of(batch.output_mask)) & adapter.kinds
        if not wanted:
            raise ValueError(f"model '{adapter.name}' produces none of {kinds_of(batch.output_mask)}")
        lengths = [len(item.input_ids) for item in batch.items]
        # A padding-free adapter runs the whole batch at once; the others run in length runs
        # whose padding stays small.
        chunks = (
            [slice(0, len(lengths))]
            if adapter.is_padding_free
            else split_by_padding(lengths, MAX_PADDING_WASTE, self._min_chunk_tokens)
        )
        parts = [self._forward(adapter, batch.items[chunk], batch.is_query, wanted) for chunk in chunks]
        return {kind: Output.concat([part[kind] for part in parts]) for kind in wanted}

    def run_dense(self, adapter: Adapter, batch: Batch) -> np.ndarray:
        """float32 [len(batch.items), dim] dense rows (the dense-only path of older callers)."""
        return self.run(adapter, batch)[ResultKind.DENSE].values

    def _forward(
        self, adapter: Adapter, items: list[PendingItem], is_query: bool, wanted: frozenset[ResultKind]
    ) -> dict[ResultKind, Output]:
        padded = pad_items(items, adapter.pad_token_id)
        optional = [array for array in (padded.token_type_ids, padded.aux) if array is not None]
        ids, mask, *moved = to_device([padded.input_ids, padded.attention_mask, *optional], self.device)
        rest = iter(moved)
        inputs = ForwardInputs(
            input_ids=ids,
            attention_mask=mask,
            token_type_ids=None if padded.token_type_ids is None else next(rest),
            aux=None if padded.aux is None else next(rest),
            lengths=[len(item.input_ids) for item in items],
            is_query=is_query,
            scalar=items[0].scalar,  # one per batch: the frontend keys batches by it
        )
        return adapter.forward(inputs, wanted)

    def _to_device(self, array: np.ndarray) -> torch.Tensor:
        return to_device([array], self.device)[0]


def _work(batch: Batch) -> tuple[int, bool]:
    """A batch's work for the thread policy: items for media, else tokens; and whether media."""
    media = is_media(batch)
    return (len(batch.items) if media else batch.n_tokens), media  # n_tokens kept by the batcher


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
