"""A finished batch split into ring messages: every request its own rows, in its own item order."""

from __future__ import annotations

import numpy as np

from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.inference import Finished
from sie.gpu_proc.outputs import Output, ragged
from sie.gpu_proc.results import result_messages
from sie.shm.layout import Op, ResultKind, Status, decode_result

# (frontend, req_id, item_index) per batch row, as a length-sorted batch mixes them.
ROWS = [(0, 7, 1), (1, 7, 0), (0, 7, 0), (0, 8, 0), (0, 9, 2), (0, 9, 0), (0, 9, 1)]


def finished(failed: tuple[PendingItem, ...] = ()) -> Finished:
    items = [
        PendingItem(src, req, idx, np.ones(row + 1, np.int32), None, 0.0, 1_000_000 * (row + 1))
        for row, (src, req, idx) in enumerate(ROWS)
    ]
    batch = Batch(GroupKey(0, int(Op.ENCODE), 5, 0, 0), items, sum(range(1, 8)), 7, 0.0)
    dense = np.arange(len(ROWS) * 3, dtype=np.float32).reshape(-1, 3)
    vectors = ragged(
        ResultKind.MULTIVECTOR, [np.full((row % 3 + 1, 2), row, np.float32) for row in range(len(ROWS))]
    )
    outputs = {ResultKind.DENSE: Output(ResultKind.DENSE, dense), ResultKind.MULTIVECTOR: vectors}
    return Finished(batch, outputs, Status.OK, "", started_ns=9_000_000, finished_ns=9_500_000, failed=failed)


def test_each_request_gets_its_rows_once_per_kind() -> None:
    done = finished()
    got: dict[tuple[int, int, ResultKind], tuple[list[int], np.ndarray, int]] = {}
    for frontend, req_id, message in result_messages(done):
        block = decode_result(message)
        assert block.req_id == req_id and block.status == Status.OK
        assert (block.infer_us, block.batch_items, block.batch_tokens) == (500, 7, 28)
        got[(frontend, req_id, block.kind)] = (block.item_index.tolist(), block.values, block.queue_us)
    assert sorted(got) == sorted(
        (src, req, kind)
        for src, req in {(0, 7), (1, 7), (0, 8), (0, 9)}
        for kind in (ResultKind.DENSE, ResultKind.MULTIVECTOR)
    )
    for (src, req, kind), (indices, values, queue_us) in got.items():
        rows = [r for r, (s, q, _) in enumerate(ROWS) if (s, q) == (src, req)]
        assert indices == [ROWS[r][2] for r in rows]
        assert queue_us == 9_000 - 1_000 * (rows[0] + 1)  # from the request's earliest item
        if kind == ResultKind.DENSE:
            np.testing.assert_array_equal(values, done.outputs[kind].values[rows])  # type: ignore[index]
        else:
            assert values[:, 0].tolist() == [r for r in rows for _ in range(r % 3 + 1)]


def test_a_request_with_a_refused_item_gets_one_error_and_no_rows() -> None:
    done = finished()
    refused = tuple(item for item in done.batch.items if item.req_id == 9)
    messages = result_messages(finished(failed=refused))
    blocks = [decode_result(m) for _, req, m in messages if req == 9]
    assert [b.status for b in blocks] == [Status.OUT_OF_MEMORY]
    assert len(messages) == 1 + 3 * 2


def test_a_failed_batch_answers_each_request_once() -> None:
    done = finished()
    failed = Finished(done.batch, None, Status.INFERENCE_ERROR, "boom", 0, 1)
    answers = [(src, req, decode_result(m)) for src, req, m in result_messages(failed)]
    assert sorted((src, req) for src, req, _ in answers) == [(0, 7), (0, 8), (0, 9), (1, 7)]
    assert all(b.status == Status.INFERENCE_ERROR and b.message == "boom" for _, _, b in answers)
