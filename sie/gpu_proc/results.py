"""A finished batch as ring messages: one per (frontend, request, result kind), or one error each.

Kinds with one row per item (DENSE, SCORES) are encoded for all requests of a size at once
(`sie.shm.result_rows`): under load most requests hold one item, and a message each built on its
own cost more CPU than the rest of the device's work per item. Ragged kinds go one by one.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from sie.gpu_proc.inference import Finished
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultBlock, ResultKind, Status, encode_result, error_result
from sie.shm.result_rows import encode_row_results

# (frontend, req_id, encoded message)
Message = tuple[int, int, np.ndarray]
Request = tuple[int, int]  # (frontend, req_id)
U32_MAX = 2**32 - 1


def result_messages(done: Finished) -> list[Message]:
    batch = done.batch
    rows: dict[Request, list[int]] = defaultdict(list)
    for row, item in enumerate(batch.items):
        rows[(item.source, item.req_id)].append(row)
    if done.outputs is None:
        return [
            (src, req_id, encode_result(error_result(req_id, done.status, done.message)))
            for src, req_id in rows
        ]
    # Items refused after out-of-memory recovery fail their requests; the others are answered.
    refused = dict.fromkeys((item.source, item.req_id) for item in done.failed)
    messages = [
        (src, req_id, encode_result(error_result(req_id, Status.OUT_OF_MEMORY, done.message)))
        for src, req_id in refused
    ]
    answered = [(request, picked) for request, picked in rows.items() if request not in refused]
    if not answered:
        return messages
    n = len(batch.items)
    item_index = np.fromiter((item.item_index for item in batch.items), np.int32, n)
    submit_ns = np.fromiter((item.submit_ns for item in batch.items), np.uint64, n)
    timing = _Timing(done, submit_ns)
    for kind, output in done.outputs.items():
        if output.is_ragged:
            messages += _ragged(kind, output, answered, item_index, timing)
        else:
            messages += _rows(kind, output, answered, item_index, timing)
    return messages


class _Timing:
    """A batch's timing fields, the same for every message but its queue time (per request)."""

    def __init__(self, done: Finished, submit_ns: np.ndarray) -> None:
        self.started_ns = np.uint64(done.started_ns)
        self.submit_ns = submit_ns
        self.infer_us = min((done.finished_ns - done.started_ns) // 1000, U32_MAX)
        self.batch_items = len(done.batch.items)
        self.batch_tokens = done.batch.n_tokens

    def queue_us(self, rows: np.ndarray) -> np.ndarray:
        """uint32 queue time of each request from its earliest item's submit time (rows [g, k])."""
        first = self.submit_ns[rows].min(axis=1)
        waited = self.started_ns - np.minimum(first, self.started_ns)  # 0 for a clock ahead of ours
        return np.minimum(waited // np.uint64(1000), U32_MAX).astype(np.uint32)


def _rows(
    kind: ResultKind,
    output: Output,
    answered: list[tuple[Request, list[int]]],
    item_index: np.ndarray,
    timing: _Timing,
) -> list[Message]:
    by_size: dict[int, list[tuple[Request, list[int]]]] = defaultdict(list)
    for request, picked in answered:
        by_size[len(picked)].append((request, picked))
    messages: list[Message] = []
    for group in by_size.values():
        picked_rows = np.array([picked for _, picked in group], np.intp)  # [g, k]
        encoded = encode_row_results(
            np.fromiter((req_id for (_, req_id), _ in group), np.uint64, len(group)),
            kind,
            item_index[picked_rows],
            output.values[picked_rows],
            timing.queue_us(picked_rows),
            infer_us=timing.infer_us,
            batch_items=timing.batch_items,
            batch_tokens=timing.batch_tokens,
        )
        messages += [
            (src, req_id, message) for ((src, req_id), _), message in zip(group, encoded, strict=True)
        ]
    return messages


def _ragged(
    kind: ResultKind,
    output: Output,
    answered: list[tuple[Request, list[int]]],
    item_index: np.ndarray,
    timing: _Timing,
) -> list[Message]:
    messages: list[Message] = []
    for (src, req_id), picked in answered:
        part = output.take(picked)
        block = ResultBlock(
            req_id=req_id,
            kind=kind,
            item_index=item_index[picked],
            item_status=np.zeros(len(picked), np.uint8),
            values=part.values,
            dim=part.dim,
            row_offsets=part.row_offsets,
            indices=part.indices,
            queue_us=int(timing.queue_us(np.array([picked], np.intp))[0]),
            infer_us=timing.infer_us,
            batch_items=timing.batch_items,
            batch_tokens=timing.batch_tokens,
        )
        messages.append((src, req_id, encode_result(block)))
    return messages
