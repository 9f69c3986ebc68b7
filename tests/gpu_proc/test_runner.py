"""Padding: flat item ids -> right-padded rectangular arrays."""

from __future__ import annotations

import numpy as np

from sie.gpu_proc.runner import pad_batch

from .tiny import as_batch


def test_pads_right_with_the_models_pad_id() -> None:
    items = [np.array([7, 8, 9], np.int32), np.array([5], np.int32), np.array([4, 6], np.int32)]
    input_ids, mask, types = pad_batch(as_batch(items), pad_token_id=1)
    assert input_ids.dtype == np.int64 and mask.dtype == np.int64 and types is None
    assert input_ids.tolist() == [[7, 8, 9], [5, 1, 1], [4, 6, 1]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]


def test_token_types_when_any_item_has_them() -> None:
    items = [np.array([7, 8], np.int32), np.array([5, 6, 4], np.int32)]
    _, _, types = pad_batch(as_batch(items, [None, np.array([0, 1, 1], np.int8)]), pad_token_id=0)
    assert types is not None and types.dtype == np.int64
    assert types.tolist() == [[0, 0, 0], [0, 1, 1]]
