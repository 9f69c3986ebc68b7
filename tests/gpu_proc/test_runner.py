"""Padding: flat item ids -> right-padded rectangular arrays."""

from __future__ import annotations

import numpy as np

from sie.gpu_proc.padding import pad_items
from sie.gpu_proc.runner import split_by_padding

from .tiny import as_batch


def test_pads_right_with_the_models_pad_id() -> None:
    items = [np.array([7, 8, 9], np.int32), np.array([5], np.int32), np.array([4, 6], np.int32)]
    input_ids, mask, types, _ = pad_items(as_batch(items).items, pad_token_id=1)
    assert input_ids.dtype == np.int64 and mask.dtype == np.int64 and types is None
    assert input_ids.tolist() == [[7, 8, 9], [5, 1, 1], [4, 6, 1]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_token_types_when_any_item_has_them() -> None:
    items = [np.array([7, 8], np.int32), np.array([5, 6, 4], np.int32)]
    _, _, types, _ = pad_items(as_batch(items, [None, np.array([0, 1, 1], np.int8)]).items, pad_token_id=0)
    assert types is not None and types.dtype == np.int64
    assert types.tolist() == [[0, 0, 0], [0, 1, 1]]


def test_split_keeps_runs_of_similar_length_together() -> None:
    lengths = [10] * 20 + [40] * 20 + [100] * 5
    chunks = split_by_padding(lengths, max_waste=0.15, min_chunk_tokens=100)
    assert [(c.start, c.stop) for c in chunks] == [(0, 20), (20, 40), (40, 45)]


def test_split_never_leaves_pieces_below_the_minimum() -> None:
    lengths = [5, 6, 50, 51, 52]
    assert split_by_padding(lengths, max_waste=0.15, min_chunk_tokens=1000) == [slice(0, 5)]
    assert split_by_padding([7], max_waste=0.0, min_chunk_tokens=0) == [slice(0, 1)]


def test_split_bounds_the_padding_of_every_chunk() -> None:
    rng = np.random.default_rng(0)
    lengths = sorted(rng.integers(10, 120, 64).tolist())
    for chunk in split_by_padding(lengths, max_waste=0.15, min_chunk_tokens=0):
        part = lengths[chunk]
        assert sum(part) >= (1 - 0.15) * len(part) * max(part)
    covered = [i for c in split_by_padding(lengths, 0.15, 300) for i in range(c.start, c.stop)]
    assert covered == list(range(64))
