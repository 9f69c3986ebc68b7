"""A batch of images or audio windows -> one adapter forward (the runner's media path).

Every item of a media batch has the same shape of input (the batcher never mixes modalities, and
the frontend resized every image to the model's size), so there is nothing to split by length:
pixels are stacked into one tensor, audio windows go as a list (the adapter pads them to its
window), and the tokens items bring besides (OWLv2 label queries, a Whisper prompt) are padded
as text is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.padding import pad_items
from sie.shm.layout import ResultKind, kinds_of

if TYPE_CHECKING:
    from sie.gpu_proc.adapters.base import Adapter
    from sie.gpu_proc.batcher import Batch, PendingItem
    from sie.gpu_proc.outputs import Output

ToDevice = Callable[[np.ndarray], torch.Tensor]


def is_media(batch: Batch) -> bool:
    return bool(batch.items) and batch.items[0].media is not None


def run_media(adapter: Adapter, batch: Batch, to_device: ToDevice) -> dict[ResultKind, Output]:
    """Every kind the batch asked for; row i of each belongs to batch.items[i]."""
    wanted = frozenset(kinds_of(batch.output_mask)) & adapter.kinds
    if not wanted:
        raise ValueError(f"model '{adapter.name}' produces none of {kinds_of(batch.output_mask)}")
    return adapter.forward(media_inputs(batch.items, adapter.pad_token_id, batch.is_query, to_device), wanted)


def media_inputs(
    items: list[PendingItem], pad_token_id: int, is_query: bool, to_device: ToDevice
) -> ForwardInputs:
    first = items[0].media
    assert first is not None  # is_media(batch) chose this path
    pixels = samples = None
    if first.ndim == 3:
        pixels = to_device(np.stack([item.media for item in items if item.media is not None]))
    else:
        # Kept on the host: a feature extractor pads them to the model's window before any transfer.
        samples = [
            torch.from_numpy(np.ascontiguousarray(item.media)) for item in items if item.media is not None
        ]
    input_ids, attention_mask, aux = _tokens(items, pad_token_id, to_device)
    return ForwardInputs(
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_type_ids=None,
        aux=aux,
        lengths=[len(item.input_ids) for item in items],
        is_query=is_query,
        pixels=pixels,
        samples=samples,
        scalar=items[0].scalar,
    )


def _tokens(
    items: list[PendingItem], pad_token_id: int, to_device: ToDevice
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    if not any(len(item.input_ids) for item in items):
        empty = torch.zeros((len(items), 0), dtype=torch.int64)
        return to_device(empty.numpy()), to_device(empty.numpy()), None
    padded = pad_items(items, pad_token_id)
    aux = None if padded.aux is None else to_device(padded.aux)
    return to_device(padded.input_ids), to_device(padded.attention_mask), aux
