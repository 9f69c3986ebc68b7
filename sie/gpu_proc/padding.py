"""Items of a batch as right-padded int64 arrays: what text forwards (the runner) and the token side
of media forwards (sie.gpu_proc.media) feed a model."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from sie.gpu_proc.batcher import PendingItem


class Padded(NamedTuple):
    """Right-padded int64 arrays of a run of items."""

    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_type_ids: np.ndarray | None
    aux: np.ndarray | None


def pad_items(items: list[PendingItem], pad_token_id: int) -> Padded:
    """Right-padded int64 input_ids and attention_mask, plus token_type_ids / aux if any item has them.

    One boolean mask scatters all items' flat ids at once; there is always at least one item.
    """
    lengths = np.fromiter((len(item.input_ids) for item in items), np.int64, len(items))
    mask = np.arange(lengths.max()) < lengths[:, None]
    input_ids = np.full(mask.shape, pad_token_id, np.int64)
    input_ids[mask] = np.concatenate([item.input_ids for item in items])
    token_type_ids = aux = None
    if any(item.token_type_ids is not None for item in items):
        token_type_ids = np.zeros(mask.shape, np.int64)
        token_type_ids[mask] = np.concatenate([_or_zeros(item.token_type_ids, item) for item in items])
    if any(item.aux is not None for item in items):
        aux = np.zeros(mask.shape, np.int64)
        aux[mask] = np.concatenate([_or_zeros(item.aux, item) for item in items])
    return Padded(input_ids, mask.astype(np.int64), token_type_ids, aux)


def _or_zeros(values: np.ndarray | None, item: PendingItem) -> np.ndarray:
    return np.zeros(len(item.input_ids), np.int8) if values is None else values
