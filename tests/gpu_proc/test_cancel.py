"""Cancelled requests: their items leave a batch before it runs, counted; nothing else changes."""

from __future__ import annotations

import numpy as np

from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.cancel import Cancellations
from sie.metrics.recorders import DeviceRecorder
from tests.metrics.blocks import made_blocks


def batch_of(owners: list[tuple[int, int, int]]) -> Batch:
    """Items as (source, req_id, length), already in ascending length order."""
    items = [
        PendingItem(source, req_id, i, np.ones(length, np.int32), None, 0.0, 0)
        for i, (source, req_id, length) in enumerate(owners)
    ]
    return Batch(GroupKey(2, 1, 1, 0, 0), items, sum(o[2] for o in owners), owners[-1][2], 0.0)


def test_nothing_cancelled_returns_the_same_batch() -> None:
    batch = batch_of([(0, 1, 3), (0, 2, 5)])
    assert Cancellations().filter(batch) is batch


def test_cancelled_items_leave_and_are_counted() -> None:
    with made_blocks(n_devices=1, n_frontends=2, n_models=3) as blocks:
        cancels = Cancellations(DeviceRecorder(blocks.stats, 0, blocks.control))
        cancels.add(source=1, req_id=7, now=0.0)
        batch = batch_of([(0, 7, 2), (1, 7, 3), (1, 8, 4), (1, 7, 9)])  # req 7 of frontend 0 is another one
        kept = cancels.filter(batch)
        assert kept is not None
        assert [(i.source, i.req_id) for i in kept.items] == [(0, 7), (1, 8)]
        assert (kept.n_tokens, kept.max_length, kept.key) == (6, 4, batch.key)
        assert blocks.stats.v["cancelled_items"][0].tolist() == [0, 0, 2, 0]
        assert cancels.filter(batch_of([(1, 7, 1)])) is None  # all gone: nothing to run
        assert blocks.stats.v["cancelled_items"][0, 2] == 3


def test_old_and_excess_entries_expire() -> None:
    cancels = Cancellations(ttl_s=10.0, max_entries=3)
    for req_id in range(5):
        cancels.add(0, req_id, now=float(req_id))
    assert len(cancels) == 3  # the two oldest made room
    cancels.add(0, 99, now=13.5)  # 2, 3 are now older than 10 s
    assert len(cancels) == 2
    batch = batch_of([(0, 4, 1), (0, 99, 2), (0, 2, 3)])
    kept = cancels.filter(batch)
    assert kept is not None and [i.req_id for i in kept.items] == [2]
