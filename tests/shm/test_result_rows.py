"""Result messages of many requests built at once: byte for byte what encoding each one writes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sie.shm.layout import ResultBlock, ResultKind, decode_result, encode_result
from sie.shm.result_rows import encode_row_results


@settings(max_examples=60, deadline=None)
@given(
    g=st.integers(1, 5),
    k=st.integers(1, 4),
    dim=st.integers(1, 9),
    half=st.booleans(),
    kind=st.sampled_from([ResultKind.DENSE, ResultKind.SCORES]),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_row_is_the_message_encode_result_writes(
    g: int, k: int, dim: int, half: bool, kind: ResultKind, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((g, k, dim)).astype(np.float16 if half else np.float32)
    req_ids = rng.integers(0, 2**63, g, dtype=np.uint64)
    item_index = rng.integers(0, 1000, (g, k), dtype=np.int32)
    queue_us = rng.integers(0, 2**32, g, dtype=np.uint32)
    rows = encode_row_results(
        req_ids, kind, item_index, values, queue_us, infer_us=77, batch_items=g * k, batch_tokens=123
    )
    for r in range(g):
        block = ResultBlock(
            req_id=int(req_ids[r]),
            kind=kind,
            item_index=item_index[r],
            item_status=np.zeros(k, np.uint8),
            values=values[r],
            dim=dim,
            queue_us=int(queue_us[r]),
            infer_us=77,
            batch_items=g * k,
            batch_tokens=123,
        )
        assert rows[r].tobytes() == encode_result(block).tobytes()
        np.testing.assert_array_equal(decode_result(rows[r]).values, values[r])


def test_ragged_kinds_and_other_dtypes_are_refused() -> None:
    one = np.zeros(1, np.uint64), np.zeros((1, 1), np.int32), np.zeros(1, np.uint32)
    timing = {"infer_us": 0, "batch_items": 1, "batch_tokens": 1}
    with pytest.raises(ValueError, match="run of rows"):
        encode_row_results(
            one[0], ResultKind.MULTIVECTOR, one[1], np.zeros((1, 1, 2), np.float32), one[2], **timing
        )
    with pytest.raises(ValueError, match="float32 or float16"):
        encode_row_results(
            one[0], ResultKind.DENSE, one[1], np.zeros((1, 1, 2), np.float64), one[2], **timing
        )
