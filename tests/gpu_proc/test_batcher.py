"""Batch forming, driven with explicit clocks: no sleeps, no torch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sie.gpu_proc.batcher import Batch, Batcher
from sie.shm.layout import Op, OutputMask, TokenBatch

WAIT_S = 0.010


def request(
    lengths: list[int],
    *,
    req_id: int = 1,
    slot: int = 0,
    config_key: int = 0,
    op: Op = Op.ENCODE,
    output_mask: int = OutputMask.DENSE,
    item_base: int = 0,
    with_types: bool = False,
) -> TokenBatch:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    # Token ids encode (req_id, item, position) so a test can tell exactly which slice it got.
    parts = [req_id * 10_000 + i * 100 + np.arange(n) for i, n in enumerate(lengths)]
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    types = (np.arange(len(ids)) % 2).astype(np.int8) if with_types else None
    return TokenBatch(
        req_id=req_id,
        op=op,
        model_slot=slot,
        offsets=offsets,
        input_ids=ids.astype(np.int32),
        token_type_ids=types,
        item_base=item_base,
        output_mask=output_mask,
        config_key=config_key,
        submit_ns=123,
    )


def batcher(**kwargs: object) -> Batcher:
    kwargs.setdefault("max_batch_wait_s", WAIT_S)
    return Batcher(**kwargs)  # type: ignore[arg-type]


def ids_of(batch: Batch) -> list[tuple[int, int]]:
    return [(item.req_id, item.item_index) for item in batch.items]


def test_items_become_views_with_their_metadata() -> None:
    b = batcher()
    message = request([3, 5], req_id=7, item_base=10, with_types=True)
    assert b.try_add(message, source=2, now=1.0)
    batch = b.next_batch(1.0, idle=True)
    assert batch is not None
    first = batch.items[0]
    assert (first.source, first.req_id, first.item_index, first.submit_ns) == (2, 7, 10, 123)
    assert first.enqueued_s == 1.0
    assert first.input_ids.tolist() == [70_000, 70_001, 70_002]
    assert np.shares_memory(first.input_ids, message.input_ids)
    assert first.token_type_ids is not None and first.token_type_ids.tolist() == [0, 1, 0]
    assert batch.n_tokens == 8 and batch.max_length == 5 and batch.formed_s == 1.0
    assert len(b) == 0


def test_busy_device_waits_until_the_deadline() -> None:
    b = batcher()
    b.try_add(request([4, 4]), source=0, now=1.0)
    assert b.next_batch(1.0, idle=False) is None
    assert b.next_batch(1.0 + WAIT_S / 2, idle=False) is None
    batch = b.next_batch(1.0 + WAIT_S, idle=False)
    assert batch is not None and len(batch.items) == 2


def test_idle_device_dispatches_at_once() -> None:
    b = batcher()
    b.try_add(request([4]), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=True)
    assert batch is not None and len(batch.items) == 1
    assert b.next_batch(1.0, idle=True) is None


def test_item_cap_makes_a_group_ready_and_bounds_the_batch() -> None:
    b = batcher(max_batch_requests=4)
    b.try_add(request([2] * 6), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=False)
    assert batch is not None
    assert [index for _, index in ids_of(batch)] == [0, 1, 2, 3]
    assert b.next_batch(1.0, idle=False) is None  # two left: not full, not due
    rest = b.next_batch(1.0 + WAIT_S, idle=False)
    assert rest is not None and [item.item_index for item in rest.items] == [4, 5]


def test_token_budget_makes_a_group_ready_and_bounds_the_batch() -> None:
    b = batcher(max_batch_tokens=lambda slot: 10)
    b.try_add(request([4, 4, 4]), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=False)
    assert batch is not None
    assert batch.n_tokens == 8 and len(batch.items) == 2
    assert b.next_batch(1.0, idle=False) is None
    assert b.pending_items() == 1


def test_budget_reached_exactly_is_ready() -> None:
    b = batcher(max_batch_tokens=lambda slot: 10)
    b.try_add(request([4, 6]), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=False)
    assert batch is not None and batch.n_tokens == 10


def test_token_budget_is_per_model() -> None:
    b = batcher(max_batch_tokens=lambda slot: 8 if slot == 1 else 1000)
    b.try_add(request([4, 4, 4], slot=0), source=0, now=1.0)
    b.try_add(request([4, 4, 4], slot=1), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=False)
    assert batch is not None and batch.key.model_slot == 1 and len(batch.items) == 2
    assert b.next_batch(1.0, idle=False) is None


def test_an_item_over_the_budget_runs_alone() -> None:
    b = batcher(max_batch_tokens=lambda slot: 10)
    b.try_add(request([50, 3]), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=False)
    assert batch is not None and len(batch.items) == 1 and batch.n_tokens == 50
    rest = b.next_batch(1.0, idle=True)
    assert rest is not None and rest.n_tokens == 3


def test_fifo_within_a_group_across_requests_and_sources() -> None:
    b = batcher(max_batch_requests=3)
    b.try_add(request([5], req_id=1), source=0, now=1.0)
    b.try_add(request([5], req_id=2), source=1, now=1.1)
    b.try_add(request([5], req_id=3), source=0, now=1.2)
    b.try_add(request([5], req_id=4), source=1, now=1.3)
    batch = b.next_batch(1.3, idle=True)
    assert batch is not None
    assert [item.req_id for item in batch.items] == [1, 2, 3]
    assert {item.source for item in batch.items} == {0, 1}


def test_items_are_sorted_by_length() -> None:
    b = batcher()
    b.try_add(request([9, 2, 7, 1, 5]), source=0, now=1.0)
    batch = b.next_batch(1.0, idle=True)
    assert batch is not None
    assert [len(item.input_ids) for item in batch.items] == [1, 2, 5, 7, 9]
    assert [item.item_index for item in batch.items] == [3, 1, 4, 2, 0]
    assert batch.max_length == 9


@pytest.mark.parametrize(
    "other",
    [{"config_key": 9}, {"slot": 1}, {"op": Op.SCORE}, {"output_mask": OutputMask.SPARSE}],
)
def test_different_keys_never_share_a_batch(other: dict[str, object]) -> None:
    b = batcher()
    b.try_add(request([3], req_id=1), source=0, now=1.0)
    b.try_add(request([3], req_id=2, **other), source=0, now=1.0)  # type: ignore[arg-type]
    first = b.next_batch(1.0, idle=True)
    second = b.next_batch(1.0, idle=True)
    assert first is not None and second is not None
    assert [i.req_id for i in first.items] == [1] and [i.req_id for i in second.items] == [2]
    assert first.key != second.key


def test_oldest_group_goes_first() -> None:
    b = batcher()
    b.try_add(request([3], req_id=1, config_key=1), source=0, now=2.0)
    b.try_add(request([3], req_id=2, config_key=2), source=0, now=1.0)
    batch = b.next_batch(2.0, idle=True)
    assert batch is not None and batch.items[0].req_id == 2


def test_a_full_group_does_not_wait_behind_an_older_waiting_one() -> None:
    b = batcher(max_batch_requests=2)
    b.try_add(request([3], req_id=1, config_key=1), source=0, now=1.0)
    b.try_add(request([3, 3], req_id=2, config_key=2), source=0, now=1.001)
    batch = b.next_batch(1.001, idle=False)
    assert batch is not None and batch.key.config_key == 2


def test_admission_refuses_a_whole_message_over_the_cap() -> None:
    b = batcher(max_pending_items=5)
    assert b.try_add(request([1, 1, 1]), source=0, now=1.0)
    assert not b.try_add(request([1, 1, 1], req_id=2), source=0, now=1.0)
    assert b.pending_items(0) == 3
    assert b.try_add(request([1, 1], req_id=3), source=0, now=1.0)
    assert b.try_add(request([1, 1, 1], req_id=4, slot=1), source=0, now=1.0)  # the cap is per model
    assert (b.pending_items(0), b.pending_items(1), len(b)) == (5, 3, 8)


def test_an_empty_message_is_accepted_and_adds_nothing() -> None:
    b = batcher()
    assert b.try_add(request([]), source=0, now=1.0)
    assert len(b) == 0 and b.next_batch(1.0, idle=True) is None
    assert b.seconds_to_deadline(1.0) is None


def test_drop_source_forgets_only_that_frontends_items() -> None:
    b = batcher(max_batch_tokens=lambda slot: 10)
    b.try_add(request([4, 4], req_id=1), source=0, now=1.0)
    b.try_add(request([4], req_id=2), source=1, now=1.0)
    b.try_add(request([4], req_id=3, config_key=5), source=1, now=1.0)
    assert b.drop_source(1) == 2
    assert b.drop_source(1) == 0
    assert len(b) == 2 and b.pending_items(0) == 2
    # The token total was recomputed: 8 < 10, so the group is not full and waits.
    assert b.next_batch(1.0, idle=False) is None
    batch = b.next_batch(1.0, idle=True)
    assert batch is not None and {item.source for item in batch.items} == {0}
    assert b.next_batch(1.0, idle=True) is None


def test_drop_model_returns_its_items_in_order() -> None:
    b = batcher()
    b.try_add(request([1, 2], req_id=1, slot=3), source=0, now=1.0)
    b.try_add(request([1], req_id=2, slot=3, config_key=1), source=1, now=1.0)
    b.try_add(request([1], req_id=3, slot=4), source=0, now=1.0)
    dropped = b.drop_model(3)
    assert [(item.req_id, item.item_index) for item in dropped] == [(1, 0), (1, 1), (2, 0)]
    assert (len(b), b.pending_items(3), b.pending_items(4)) == (1, 0, 1)
    assert b.drop_model(3) == []
    batch = b.next_batch(1.0, idle=True)
    assert batch is not None and batch.key.model_slot == 4


def test_seconds_to_deadline() -> None:
    b = batcher(max_batch_requests=3)
    assert b.seconds_to_deadline(1.0) is None
    b.try_add(request([2], req_id=1, config_key=1), source=0, now=1.0)
    b.try_add(request([2], req_id=2, config_key=2), source=0, now=1.004)
    assert b.seconds_to_deadline(1.005) == pytest.approx(0.005)
    assert b.seconds_to_deadline(2.0) == 0.0
    b.try_add(request([2, 2, 2], req_id=3, config_key=3), source=0, now=1.005)
    assert b.seconds_to_deadline(1.005) == 0.0  # a full group is ready now


def test_pending_counts_follow_batches() -> None:
    b = batcher(max_batch_requests=2)
    b.try_add(request([1, 1, 1]), source=0, now=1.0)
    assert b.next_batch(1.0, idle=True) is not None
    assert (len(b), b.pending_items(), b.pending_items(0), b.pending_items(9)) == (1, 1, 1, 0)
    assert b.next_batch(1.0, idle=True) is not None
    assert len(b) == 0 and b.seconds_to_deadline(1.0) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(1, 40), min_size=1, max_size=8), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=25,
    ),
    st.integers(1, 6),
    st.integers(10, 80),
)
def test_every_item_comes_out_once_within_limits(
    messages: list[tuple[list[int], int, bool]], cap: int, budget: int
) -> None:
    b = batcher(max_batch_requests=cap, max_batch_tokens=lambda slot: budget, max_pending_items=10_000)
    now = 0.0
    seen: list[tuple[int, int, int]] = []
    formed: list[Batch] = []
    for req_id, (lengths, config_key, run_now) in enumerate(messages):
        assert b.try_add(request(lengths, req_id=req_id, config_key=config_key), source=req_id % 2, now=now)
        now += 0.003
        if run_now and (batch := b.next_batch(now, idle=False)) is not None:
            formed.append(batch)
    while (batch := b.next_batch(now, idle=True)) is not None:
        formed.append(batch)
    for batch in formed:
        lengths = [len(item.input_ids) for item in batch.items]
        assert lengths == sorted(lengths) and len(lengths) <= cap
        assert sum(lengths) == batch.n_tokens and (batch.n_tokens <= budget or len(lengths) == 1)
        seen.extend((batch.key.config_key, item.req_id, item.item_index) for item in batch.items)
        assert all(messages[item.req_id][1] == batch.key.config_key for item in batch.items)
    expected = [(ck, r, i) for r, (lengths, ck, _) in enumerate(messages) for i in range(len(lengths))]
    assert sorted(seen) == sorted(expected) and len(b) == 0
    for key in {k for k, _, _ in seen}:  # FIFO per group: batches come out in arrival order
        group = [(r, i) for k, r, i in _in_batch_order(formed, key)]
        assert group == sorted(group)


def _in_batch_order(formed: list[Batch], config_key: int) -> list[tuple[int, int, int]]:
    # Within a batch the items were sorted by length, so restore arrival order inside each batch.
    out: list[tuple[int, int, int]] = []
    for batch in formed:
        if batch.key.config_key == config_key:
            out.extend(sorted((config_key, item.req_id, item.item_index) for item in batch.items))
    return out
