"""Round trips of the two ring messages in sie.shm.layout, and rejection of truncated buffers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sie.shm.layout import (
    REQUEST_HEADER,
    RESULT_HEADER,
    LayoutError,
    Modality,
    Op,
    OutputMask,
    ResultBlock,
    ResultKind,
    Status,
    TokenBatch,
    decode_request,
    decode_result,
    encode_request,
    encode_result,
    error_result,
    request_nbytes,
    result_nbytes,
)


def _batch(items: list[list[int]], with_types: bool, with_aux: bool = False, **fields: int) -> TokenBatch:
    lengths = np.array([len(item) for item in items], np.int64)
    offsets = np.zeros(len(items) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.array([t for item in items for t in item], np.int32)
    types = (ids % 2).astype(np.int8) if with_types else None
    return TokenBatch(
        req_id=fields.get("req_id", 7),
        op=Op.ENCODE,
        model_slot=fields.get("model_slot", 3),
        offsets=offsets,
        input_ids=ids,
        token_type_ids=types,
        item_base=fields.get("item_base", 0),
        output_mask=OutputMask.DENSE | OutputMask.SPARSE,
        config_key=fields.get("config_key", 2**64 - 1),
        submit_ns=fields.get("submit_ns", 123456789),
        aux=(ids * 3 - 7).astype(np.int32) if with_aux else None,
        is_query=with_aux,
    )


def _assert_same_batch(got: TokenBatch, want: TokenBatch) -> None:
    fields = ("req_id", "op", "model_slot", "item_base", "output_mask", "config_key", "submit_ns", "is_query")
    for field in fields:
        assert getattr(got, field) == getattr(want, field), field
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.input_ids, want.input_ids)
    assert got.input_ids.dtype == np.int32 and got.offsets.dtype == np.int32
    if want.token_type_ids is None:
        assert got.token_type_ids is None
    else:
        assert got.token_type_ids is not None
        np.testing.assert_array_equal(got.token_type_ids, want.token_type_ids)
    if want.aux is None:
        assert got.aux is None
    else:
        assert got.aux is not None and got.aux.dtype == np.int32
        np.testing.assert_array_equal(got.aux, want.aux)


def _assert_same_result(got: ResultBlock, want: ResultBlock) -> None:
    for field in ("req_id", "kind", "dim", "status", "message", "queue_us", "infer_us"):
        assert getattr(got, field) == getattr(want, field), field
    assert (got.batch_items, got.batch_tokens) == (want.batch_items, want.batch_tokens)
    np.testing.assert_array_equal(got.item_index, want.item_index)
    np.testing.assert_array_equal(got.item_status, want.item_status)
    assert got.values.dtype == want.values.dtype or not want.values.size
    np.testing.assert_array_equal(got.values, want.values)
    for field in ("row_offsets", "indices"):
        if getattr(want, field) is None:
            assert getattr(got, field) is None
        else:
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field))


BATCHES = {
    "empty": [],
    "one-token": [[101]],
    "larger": [[101, *range(1000, 1000 + n), 102] for n in (0, 5, 700, 31)],
}


@pytest.mark.parametrize("with_aux", [False, True])
@pytest.mark.parametrize("with_types", [False, True])
@pytest.mark.parametrize("items", BATCHES.values(), ids=BATCHES.keys())
def test_request_round_trip(items: list[list[int]], with_types: bool, with_aux: bool) -> None:
    batch = _batch(items, with_types, with_aux)
    buf = encode_request(batch)
    n_tokens = sum(map(len, items))
    assert len(buf) == request_nbytes(len(items), n_tokens, batch.flags)
    _assert_same_batch(decode_request(buf), batch)
    np.testing.assert_array_equal(decode_request(buf).lengths(), [len(i) for i in items])


@pytest.mark.parametrize("with_types", [False, True])
def test_truncated_request_is_rejected(with_types: bool) -> None:
    buf = encode_request(_batch(BATCHES["larger"], with_types))
    for size in (0, 1, 63, 64, 65, len(buf) // 2, len(buf) - 1):
        with pytest.raises(LayoutError):
            decode_request(buf[:size])


def _results() -> dict[str, ResultBlock]:
    rng = np.random.default_rng(0)
    index = np.array([0, 2, 5], np.int32)
    ok = np.zeros(3, np.uint8)
    common: dict[str, Any] = {
        "req_id": 2**63 + 5,
        "item_index": index,
        "item_status": ok,
        "queue_us": 17,
        "infer_us": 900,
    }
    dense32 = rng.standard_normal((3, 8)).astype(np.float32)
    rows = np.array([0, 2, 2, 5], np.int32)
    return {
        "dense-f32": ResultBlock(kind=ResultKind.DENSE, values=dense32, dim=8, **common),
        "dense-f16": ResultBlock(kind=ResultKind.DENSE, values=dense32.astype(np.float16), dim=8, **common),
        "sparse": ResultBlock(
            kind=ResultKind.SPARSE,
            values=rng.random(5).astype(np.float32),
            row_offsets=rows,
            indices=np.array([3, 9, 1, 4, 30000], np.int32),
            dim=30522,
            **common,
        ),
        "multivector": ResultBlock(
            kind=ResultKind.MULTIVECTOR,
            values=rng.standard_normal((5, 4)).astype(np.float16),
            row_offsets=rows,
            dim=4,
            **common,
        ),
        "scores": ResultBlock(
            kind=ResultKind.SCORES,
            values=np.array([[0.5, 1.0], [-1.25, 2.0], [3.0, 0.0]], np.float32),
            dim=2,
            item_status=np.array([0, Status.INFERENCE_ERROR, 0], np.uint8),
            message="item 2 failed",
            batch_items=3,
            batch_tokens=77,
            **{k: v for k, v in common.items() if k != "item_status"},
        ),
        "token-scores": ResultBlock(
            kind=ResultKind.TOKEN_SCORES,
            values=rng.standard_normal((5, 3)).astype(np.float32),
            row_offsets=rows,
            dim=3,
            **common,
        ),
        "error": error_result(99, Status.OUT_OF_MEMORY, "CUDA out of memory: ünïcode"),
    }


RESULTS = _results()


@pytest.mark.parametrize("block", RESULTS.values(), ids=RESULTS.keys())
def test_result_round_trip(block: ResultBlock) -> None:
    buf = encode_result(block)
    assert len(buf) == result_nbytes(block)
    _assert_same_result(decode_result(buf), block)


@pytest.mark.parametrize("block", RESULTS.values(), ids=RESULTS.keys())
def test_truncated_result_is_rejected(block: ResultBlock) -> None:
    buf = encode_result(block)
    # Cutting at least 8 bytes always reaches data: trailing padding is under 8 bytes.
    for size in sorted({0, 1, 63, len(buf) // 2, len(buf) - 8}):
        with pytest.raises(LayoutError):
            decode_result(buf[:size])


def test_decode_rejects_non_byte_buffers() -> None:
    buf = encode_request(_batch([[1, 2]], False))
    with pytest.raises(LayoutError):
        decode_request(buf.view(np.int32))


token_lists = st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40), max_size=12)


@settings(max_examples=100, deadline=None)
@given(items=token_lists, with_types=st.booleans(), with_aux=st.booleans(), req_id=st.integers(0, 2**64 - 1))
def test_request_round_trip_property(
    items: list[list[int]], with_types: bool, with_aux: bool, req_id: int
) -> None:
    batch = _batch(items, with_types, with_aux, req_id=req_id)
    _assert_same_batch(decode_request(encode_request(batch)), batch)


def _media_batch(kind: str, n_items: int, with_tokens: bool) -> TokenBatch:
    """A request of images (uint8 or float32 pixels) or audio windows, with or without tokens."""
    rng = np.random.default_rng(n_items)
    lengths = rng.integers(1, 6, n_items) if with_tokens else np.zeros(n_items, np.int64)
    offsets = np.zeros(n_items + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = rng.integers(0, 50000, int(offsets[-1])).astype(np.int32)
    media: dict[str, Any] = {}
    if kind == "uint8":
        media["pixels"] = rng.integers(0, 256, (n_items, 7, 5, 3)).astype(np.uint8)
    elif kind == "float32":
        media["pixels"] = rng.random((n_items, 4, 6, 3)).astype(np.float32)
    else:
        per_item = rng.integers(0, 900, n_items)
        media["sample_offsets"] = np.concatenate([[0], np.cumsum(per_item)]).astype(np.int32)
        media["samples"] = rng.standard_normal(int(per_item.sum())).astype(np.float32)
        media["scalar"] = 0.25
    return TokenBatch(
        req_id=11,
        op=Op.EXTRACT,
        model_slot=2,
        offsets=offsets,
        input_ids=ids,
        aux=(ids % 3).astype(np.int32) if with_tokens else None,
        output_mask=OutputMask.TOKENS | OutputMask.TOKEN_TIMES,
        **media,
    )


MEDIA = [(kind, n, toks) for kind in ("uint8", "float32", "audio") for n in (1, 3) for toks in (False, True)]


@pytest.mark.parametrize(("kind", "n_items", "with_tokens"), MEDIA)
def test_media_request_round_trip(kind: str, n_items: int, with_tokens: bool) -> None:
    batch = _media_batch(kind, n_items, with_tokens)
    buf = encode_request(batch)
    pixels, samples = batch.pixels, batch.samples
    h, w = pixels.shape[1:3] if pixels is not None else (0, 0)
    n_samples = 0 if samples is None else len(samples)
    assert len(buf) == request_nbytes(n_items, len(batch.input_ids), batch.flags, h, w, n_samples)
    got = decode_request(buf)
    _assert_same_batch(got, batch)
    assert got.modality == batch.modality != Modality.TEXT
    assert got.scalar == batch.scalar
    if pixels is None:
        assert got.pixels is None
    else:
        assert got.pixels is not None and got.pixels.dtype == pixels.dtype
        np.testing.assert_array_equal(got.pixels, pixels)
    if samples is None:
        assert got.samples is None and got.sample_offsets is None
    else:
        assert got.samples is not None and got.sample_offsets is not None
        np.testing.assert_array_equal(got.samples, samples)
        np.testing.assert_array_equal(got.sample_offsets, batch.sample_offsets)


@pytest.mark.parametrize("kind", ["uint8", "float32", "audio"])
def test_truncated_media_request_is_rejected(kind: str) -> None:
    buf = encode_request(_media_batch(kind, 3, True))
    for size in (64, len(buf) // 2, len(buf) - 8):
        with pytest.raises(LayoutError):
            decode_request(buf[:size])


def test_text_requests_carry_no_media() -> None:
    batch = _batch([[1, 2, 3]], True)
    got = decode_request(encode_request(batch))
    assert got.modality == Modality.TEXT
    assert got.pixels is None and got.samples is None and got.scalar == 0.0


def test_pixels_must_match_the_items() -> None:
    batch = _media_batch("uint8", 3, False)
    wrong = TokenBatch(**{**_fields(batch), "pixels": batch.pixels[:2] if batch.pixels is not None else None})
    with pytest.raises(LayoutError):
        encode_request(wrong)


def test_bad_sample_offsets_are_rejected() -> None:
    buf = encode_request(_media_batch("audio", 3, False))
    # The header, item offsets int32[4] (16 bytes), no tokens, then the sample offsets: make the first 5.
    at = 64 + 16
    assert buf[at : at + 4].view(np.int32)[0] == 0
    buf[at : at + 4] = np.array([5], np.int32).view(np.uint8)
    with pytest.raises(LayoutError):
        decode_request(buf)


def _fields(batch: TokenBatch) -> dict[str, Any]:
    return {name: getattr(batch, name) for name in TokenBatch.__dataclass_fields__}


MEDIA_RESULTS = {
    "tokens": ResultBlock(
        req_id=4,
        kind=ResultKind.TOKENS,
        item_index=np.array([0, 1], np.int32),
        item_status=np.zeros(2, np.uint8),
        values=np.array([[50258], [50259], [50359], [440], [50257]], np.float32),
        row_offsets=np.array([0, 3, 5], np.int32),
        dim=1,
    ),
    "boxes": ResultBlock(
        req_id=5,
        kind=ResultKind.BOXES,
        item_index=np.array([3], np.int32),
        item_status=np.zeros(1, np.uint8),
        values=np.arange(24, dtype=np.float32).reshape(4, 6),
        row_offsets=np.array([0, 4], np.int32),
        dim=6,
    ),
}


@pytest.mark.parametrize("block", MEDIA_RESULTS.values(), ids=MEDIA_RESULTS.keys())
def test_media_result_round_trip(block: ResultBlock) -> None:
    buf = encode_result(block)
    assert len(buf) == result_nbytes(block)
    _assert_same_result(decode_result(buf), block)


def test_headers_sit_where_the_documented_record_types_say() -> None:
    """The struct packing and the numpy record types (the documented layout) agree field by field."""
    batch = TokenBatch(
        req_id=(1 << 63) + 5,
        op=Op.SCORE,
        model_slot=7,
        offsets=np.array([0, 2, 3], np.int32),
        input_ids=np.array([4, 5, 6], np.int32),
        token_type_ids=np.array([0, 1, 1], np.int8),
        item_base=11,
        output_mask=OutputMask.SCORES,
        config_key=(1 << 40) + 3,
        submit_ns=123_456_789_012,
        is_query=True,
        scalar=0.5,
    )
    header = encode_request(batch)[:64].view(REQUEST_HEADER)[0]
    expected = {"req_id": batch.req_id, "config_key": batch.config_key, "submit_ns": batch.submit_ns,
                "op": int(Op.SCORE), "flags": batch.flags, "model_slot": 7, "item_base": 11, "n_items": 2,
                "n_tokens": 3, "output_mask": int(OutputMask.SCORES), "media_h": 0, "media_w": 0,
                "n_samples": 0, "scalar": 0.5}  # fmt: skip
    assert {name: header[name].item() for name in expected} == expected
    block = ResultBlock(
        req_id=99,
        kind=ResultKind.SPARSE,
        item_index=np.array([0, 1], np.int32),
        item_status=np.zeros(2, np.uint8),
        values=np.ones(3, np.float16),
        dim=30522,
        row_offsets=np.array([0, 1, 3], np.int32),
        indices=np.array([5, 6, 7], np.int32),
        message="ok",
        queue_us=12,
        infer_us=34,
        batch_items=8,
        batch_tokens=256,
    )
    result = encode_result(block)[:64].view(RESULT_HEADER)[0]
    expected = {"req_id": 99, "status": int(Status.OK), "kind": int(ResultKind.SPARSE), "n_items": 2,
                "dim": 30522, "n_rows": 3, "message_bytes": 2, "queue_us": 12, "infer_us": 34,
                "batch_items": 8, "batch_tokens": 256}  # fmt: skip
    assert {name: result[name].item() for name in expected} == expected
    assert result["dtype"] != 0  # float16 values are marked as such
