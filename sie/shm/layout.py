"""Binary layouts of the two messages that cross the rings. Both sides import this module.

A message is a fixed 64-byte little-endian header followed by flat arrays; decoding returns numpy
views into the buffer it was given (no copies, no pickle). Every array section starts on an
8-byte boundary so float and int views are aligned.

Request (frontend -> device): one tokenized HTTP request, or one chunk of a large one.

    REQUEST_HEADER                       64 B
    offsets         int32[n_items + 1]   prefix sums: item i is input_ids[offsets[i]:offsets[i+1]]
    input_ids       int32[n_tokens]
    token_type_ids  int8[n_tokens]       only when flags & HAS_TOKEN_TYPES
    aux             int32[n_tokens]      only when flags & HAS_AUX: a per-token integer an adapter
                                         needs beside the ids (GLiNER's word index of each token)
    pixels          u8|f32[n_items, media_h, media_w, 3]
                                         only when flags & HAS_PIXELS: one image per item, RGB,
                                         already resized/cropped by the frontend; float32 when
                                         flags & FLOAT_PIXELS (a processor whose resize is not uint8)
    sample_offsets  int32[n_items + 1]   only when flags & HAS_AUDIO: item i is
    samples         f32[n_samples]       samples[sample_offsets[i]:sample_offsets[i+1]], mono, at the
                                         model's rate (Qwen3-VL: item i's images' resized RGB bytes,
                                         4 a word, each image its own size; sie.frontend.tasks.qwen3_vl)

A media request still has `offsets` and may have `input_ids`: the tokens each item brings besides
its pixels or samples (an OWLv2 image's label queries, a Whisper window's decoder prompt).

Result (device -> frontend): results for some items of one request; a request whose items were
spread over several batches gets several result messages.

    RESULT_HEADER                        64 B
    item_index      int32[n_items]       absolute item positions within the HTTP request
    item_status     uint8[n_items]       Status per item
    row_offsets     int32[n_items + 1]   only for ragged kinds (rows of item i)
    indices         int32[n_rows]        only for SPARSE (vocabulary ids, ascending per item)
    values          f32|f16[n_rows, cols] cols = dim, except SPARSE (1)
    message         utf-8[message_bytes] why status is not OK (may be empty)

A result kind is either one row per item (DENSE, SCORES) or ragged: a run of rows per item
(SPARSE, MULTIVECTOR, TOKEN_SCORES). One forward pass may produce several kinds (a hybrid model's
dense + sparse + multivector); each kind travels as its own message, so the frontend knows a
request is complete when every kind it asked for has every item.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

# 2: media sections (pixels, samples) and the TOKENS / TOKEN_TIMES / BOXES result kinds.
LAYOUT_VERSION = 2
ALIGN = 8


class Op(IntEnum):
    ENCODE = 1
    SCORE = 2
    EXTRACT = 3
    LOAD_MODEL = 4
    CANCEL = 5  # the client left: drop this request's items that have not run yet (no answer)


class Status(IntEnum):
    OK = 0
    QUEUE_FULL = 1
    MODEL_NOT_LOADED = 2
    OUT_OF_MEMORY = 3
    INFERENCE_ERROR = 4
    INVALID = 5
    LORA_LOADING = 6  # the request's LoRA adapter is loading (503 LORA_LOADING, Retry-After 1)
    LORA_FAILED = 7  # it failed to load (502, for the load cool-down)


# A request's `config_key` (items share a batch only when it matches) carries in bits 32-47 the LoRA
# adapter the device applies: 0 for none, else 1 + its position among the model's sorted `loras`.
LORA_SHIFT = 32


def lora_of(config_key: int) -> int:
    return (config_key >> LORA_SHIFT) & 0xFFFF


def with_lora(config_key: int, lora: int) -> int:
    return (config_key & ~(0xFFFF << LORA_SHIFT)) | (lora << LORA_SHIFT)


class ResultKind(IntEnum):
    NONE = 0
    DENSE = 1  # [n_items, dim] pooled embeddings
    SPARSE = 2  # ragged: (index, value) runs, indices ascending per item
    MULTIVECTOR = 3  # ragged: [n_tokens_i, dim] token embeddings
    SCORES = 4  # [n_items, dim] raw logits per item (cross-encoders, NLI pairs)
    TOKEN_SCORES = 5  # ragged: [n_rows_i, dim] raw logits per token or span (NER, GLiNER)
    TOKENS = 6  # ragged: [n_tokens_i, 1] generated token ids (exact in float32 below 2**24)
    TOKEN_TIMES = 7  # ragged: [n_tokens_i, 1] seconds each generated token starts at ([n, 2]: start, end)
    BOXES = 8  # ragged: [n_boxes_i, 6] cx, cy, w, h (0..1 of the model's input), best logit, its label


class ValueDType(IntEnum):
    FLOAT32 = 0
    FLOAT16 = 1


class OutputMask(IntEnum):
    """Which result kinds a request wants: bit `1 << (kind - 1)` for each ResultKind."""

    DENSE = 1
    SPARSE = 2
    MULTIVECTOR = 4
    SCORES = 8
    TOKEN_SCORES = 16
    TOKENS = 32
    TOKEN_TIMES = 64
    BOXES = 128


def mask_of(kinds: set[ResultKind] | list[ResultKind]) -> int:
    mask = 0
    for kind in kinds:
        mask |= 1 << (int(kind) - 1)
    return mask


def kinds_of(mask: int) -> list[ResultKind]:
    return list(_kinds_of(mask))


@functools.lru_cache(maxsize=256)
def _kinds_of(mask: int) -> tuple[ResultKind, ...]:
    return tuple(kind for kind in ResultKind if kind != ResultKind.NONE and mask & (1 << (int(kind) - 1)))


RAGGED_KINDS = frozenset(
    {
        ResultKind.SPARSE,
        ResultKind.MULTIVECTOR,
        ResultKind.TOKEN_SCORES,
        ResultKind.TOKENS,
        ResultKind.TOKEN_TIMES,
        ResultKind.BOXES,
    }
)

HAS_TOKEN_TYPES = 1
HAS_AUX = 2
IS_QUERY = 4  # the items are queries (encode with is_query): ColBERT expands them, SPLADE may differ
HAS_PIXELS = 8
FLOAT_PIXELS = 16
HAS_AUDIO = 32


class Modality(IntEnum):
    """What a request's items are; items of different modalities never share a batch."""

    TEXT = 0
    IMAGE = 1
    AUDIO = 2


_NUMPY_DTYPES = {ValueDType.FLOAT32: np.dtype("<f4"), ValueDType.FLOAT16: np.dtype("<f2")}

REQUEST_HEADER = np.dtype(
    [
        ("req_id", "<u8"),
        ("config_key", "<u8"),
        ("submit_ns", "<u8"),
        ("op", "<u2"),
        ("flags", "<u2"),
        ("model_slot", "<u4"),
        ("item_base", "<u4"),
        ("n_items", "<u4"),
        ("n_tokens", "<u4"),
        ("output_mask", "<u4"),
        ("media_h", "<u4"),
        ("media_w", "<u4"),
        ("n_samples", "<u4"),
        ("scalar", "<f4"),  # the request's one float parameter (TokenBatch.scalar)
    ]
)

RESULT_HEADER = np.dtype(
    [
        ("req_id", "<u8"),
        ("status", "<u2"),
        ("kind", "<u2"),
        ("dtype", "<u2"),
        ("_pad0", "<u2"),
        ("n_items", "<u4"),
        ("dim", "<u4"),
        ("n_rows", "<u4"),
        ("message_bytes", "<u4"),
        ("queue_us", "<u4"),
        ("infer_us", "<u4"),
        ("batch_items", "<u4"),
        ("batch_tokens", "<u4"),
        ("_pad1", "V16"),
    ]
)
assert REQUEST_HEADER.itemsize == 64 and RESULT_HEADER.itemsize == 64
# The same two headers as structs, field for field: one pack or unpack call instead of a numpy
# field access per field, which cost more than the rest of a small message's encoding.
_REQUEST = struct.Struct("<3Q2H8If")
_RESULT = struct.Struct("<Q4H8I16x")
assert _REQUEST.size == REQUEST_HEADER.itemsize and _RESULT.size == RESULT_HEADER.itemsize


class LayoutError(ValueError):
    """A buffer does not hold a well-formed message."""


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """Tokenized items of one request: flat ids plus prefix-sum offsets."""

    req_id: int
    op: Op
    model_slot: int
    offsets: np.ndarray
    input_ids: np.ndarray
    token_type_ids: np.ndarray | None = None
    item_base: int = 0
    output_mask: int = OutputMask.DENSE
    config_key: int = 0
    submit_ns: int = 0
    aux: np.ndarray | None = None
    is_query: bool = False
    pixels: np.ndarray | None = None  # uint8 or float32 [n_items, H, W, 3]
    samples: np.ndarray | None = None  # float32 [n_samples], item i at sample_offsets[i]:[i + 1]
    sample_offsets: np.ndarray | None = None  # int32 [n_items + 1]
    # The request's one float parameter, read by its family: a Whisper generation's temperature
    # (0: greedy), gliner relex's entity threshold. The frontend puts it in config_key, so one batch
    # has one value.
    scalar: float = 0.0

    @property
    def n_items(self) -> int:
        return len(self.offsets) - 1

    @property
    def flags(self) -> int:
        flags = HAS_TOKEN_TYPES if self.token_type_ids is not None else 0
        flags |= HAS_AUX if self.aux is not None else 0
        if self.pixels is not None:
            flags |= HAS_PIXELS | (FLOAT_PIXELS if self.pixels.dtype == np.float32 else 0)
        flags |= HAS_AUDIO if self.samples is not None else 0
        return flags | (IS_QUERY if self.is_query else 0)

    @property
    def modality(self) -> Modality:
        if self.pixels is not None:
            return Modality.IMAGE
        return Modality.AUDIO if self.samples is not None else Modality.TEXT

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def request_nbytes(
    n_items: int, n_tokens: int, flags: int, media_h: int = 0, media_w: int = 0, n_samples: int = 0
) -> int:
    size = 64 + _aligned(4 * (n_items + 1)) + _aligned(4 * n_tokens)
    if flags & HAS_TOKEN_TYPES:
        size += _aligned(n_tokens)
    if flags & HAS_AUX:
        size += _aligned(4 * n_tokens)
    if flags & HAS_PIXELS:
        size += _aligned(n_items * media_h * media_w * 3 * (4 if flags & FLOAT_PIXELS else 1))
    if flags & HAS_AUDIO:
        size += _aligned(4 * (n_items + 1)) + _aligned(4 * n_samples)
    return size


def _media_shape(batch: TokenBatch) -> tuple[int, int, int]:
    """(media_h, media_w, n_samples) of a request, zeros where it has no such section."""
    h, w = batch.pixels.shape[1:3] if batch.pixels is not None else (0, 0)
    return int(h), int(w), 0 if batch.samples is None else len(batch.samples)


def encode_request(batch: TokenBatch) -> np.ndarray:
    n_items, n_tokens, flags = batch.n_items, len(batch.input_ids), batch.flags
    media_h, media_w, n_samples = _media_shape(batch)
    buf = np.zeros(request_nbytes(n_items, n_tokens, flags, media_h, media_w, n_samples), np.uint8)
    _REQUEST.pack_into(
        buf,
        0,
        batch.req_id,
        batch.config_key,
        batch.submit_ns,
        int(batch.op),
        flags,
        batch.model_slot,
        batch.item_base,
        n_items,
        n_tokens,
        batch.output_mask,
        media_h,
        media_w,
        n_samples,
        batch.scalar,
    )
    pos = 64
    pos = _put(buf, pos, np.asarray(batch.offsets, np.int32))
    pos = _put(buf, pos, np.asarray(batch.input_ids, np.int32))
    if batch.token_type_ids is not None:
        pos = _put(buf, pos, np.asarray(batch.token_type_ids, np.int8))
    if batch.aux is not None:
        pos = _put(buf, pos, np.asarray(batch.aux, np.int32))
    if batch.pixels is not None:
        if batch.pixels.shape != (n_items, media_h, media_w, 3):
            raise LayoutError(f"pixels of shape {batch.pixels.shape} are not one RGB image per item")
        pos = _put(buf, pos, np.ascontiguousarray(batch.pixels))
    if batch.samples is not None:
        if batch.sample_offsets is None or len(batch.sample_offsets) != n_items + 1:
            raise LayoutError("audio needs sample_offsets, one more than items")
        pos = _put(buf, pos, np.asarray(batch.sample_offsets, np.int32))
        _put(buf, pos, np.asarray(batch.samples, np.float32))
    return buf


_OPS = {int(op): op for op in Op}


def _op_of(value: int) -> Op:
    """`Op(value)` without the enum call's cost (a dict hit), which shows at one call per request."""
    try:
        return _OPS[value]
    except KeyError:
        raise LayoutError(f"unknown request op {value}") from None


def decode_request(buf: np.ndarray) -> TokenBatch:
    _check_message(buf)
    (req_id, config_key, submit_ns, op, flags, model_slot, item_base, n_items, n_tokens, output_mask,
     media_h, media_w, n_samples, scalar) = _REQUEST.unpack_from(buf)  # fmt: skip
    if request_nbytes(n_items, n_tokens, flags, media_h, media_w, n_samples) > len(buf):
        raise LayoutError(f"request of {n_items} items / {n_tokens} tokens overruns {len(buf)} bytes")
    pos = 64
    offsets, pos = _take(buf, pos, np.int32, n_items + 1)
    input_ids, pos = _take(buf, pos, np.int32, n_tokens)
    token_types = aux = None
    if flags & HAS_TOKEN_TYPES:
        token_types, pos = _take(buf, pos, np.int8, n_tokens)
    if flags & HAS_AUX:
        aux, pos = _take(buf, pos, np.int32, n_tokens)
    if n_items and (
        (n_items == 1 and offsets.tolist() != [0, n_tokens])  # most requests: one item, one call
        or (n_items > 1 and (offsets[0] != 0 or offsets[-1] != n_tokens or (np.diff(offsets) < 0).any()))
    ):
        raise LayoutError("request offsets are not a prefix sum of the token count")
    pixels = samples = sample_offsets = None
    if flags & HAS_PIXELS:
        dtype = np.float32 if flags & FLOAT_PIXELS else np.uint8
        flat, pos = _take(buf, pos, dtype, n_items * media_h * media_w * 3)
        pixels = flat.reshape(n_items, media_h, media_w, 3)
    if flags & HAS_AUDIO:
        sample_offsets, pos = _take(buf, pos, np.int32, n_items + 1)
        samples, pos = _take(buf, pos, np.float32, n_samples)
        if sample_offsets[0] != 0 or sample_offsets[-1] != n_samples or np.any(np.diff(sample_offsets) < 0):
            raise LayoutError("sample offsets are not a prefix sum of the sample count")
    return TokenBatch(
        req_id=req_id,
        op=_op_of(op),
        model_slot=model_slot,
        offsets=offsets,
        input_ids=input_ids,
        token_type_ids=token_types,
        item_base=item_base,
        output_mask=output_mask,
        config_key=config_key,
        submit_ns=submit_ns,
        aux=aux,
        is_query=bool(flags & IS_QUERY),
        pixels=pixels,
        samples=samples,
        sample_offsets=sample_offsets,
        scalar=scalar,
    )


@dataclass(frozen=True, slots=True)
class ResultBlock:
    """Results for some items of one request, as written by the device."""

    req_id: int
    kind: ResultKind
    item_index: np.ndarray
    item_status: np.ndarray
    values: np.ndarray
    dim: int = 0
    status: Status = Status.OK
    row_offsets: np.ndarray | None = None
    indices: np.ndarray | None = None
    message: str = ""
    queue_us: int = 0
    infer_us: int = 0
    batch_items: int = 0
    batch_tokens: int = 0

    @property
    def n_items(self) -> int:
        return len(self.item_index)


def error_result(req_id: int, status: Status, message: str) -> ResultBlock:
    """A result that fails a whole request (no items)."""
    empty = np.zeros(0, np.int32)
    return ResultBlock(
        req_id=req_id,
        kind=ResultKind.NONE,
        item_index=empty,
        item_status=np.zeros(0, np.uint8),
        values=np.zeros((0, 0), np.float32),
        status=status,
        message=message,
    )


def _value_dtype(values: np.ndarray) -> ValueDType:
    if values.dtype == np.float16:
        return ValueDType.FLOAT16
    if values.dtype == np.float32:
        return ValueDType.FLOAT32
    raise LayoutError(f"result values must be float32 or float16, not {values.dtype}")


def _has_row_offsets(kind: ResultKind) -> bool:
    return kind in RAGGED_KINDS


def _value_cols(kind: ResultKind, dim: int) -> int:
    return 1 if kind == ResultKind.SPARSE else dim


def result_nbytes(block: ResultBlock) -> int:
    n, n_rows = block.n_items, len(block.values)
    size = 64 + _aligned(4 * n) + _aligned(n)
    if _has_row_offsets(block.kind):
        size += _aligned(4 * (n + 1))
    if block.kind == ResultKind.SPARSE:
        size += _aligned(4 * n_rows)
    size += _aligned(block.values.nbytes)
    return size + len(block.message.encode())


def encode_result(block: ResultBlock) -> np.ndarray:
    message = block.message.encode()
    buf = np.zeros(result_nbytes(block), np.uint8)
    _RESULT.pack_into(
        buf,
        0,
        block.req_id,
        int(block.status),
        int(block.kind),
        int(_value_dtype(block.values)) if block.values.size else 0,
        0,
        block.n_items,
        block.dim,
        len(block.values),
        len(message),
        block.queue_us,
        block.infer_us,
        block.batch_items,
        block.batch_tokens,
    )
    pos = _put(buf, 64, np.asarray(block.item_index, np.int32))
    pos = _put(buf, pos, np.asarray(block.item_status, np.uint8))
    if _has_row_offsets(block.kind):
        if block.row_offsets is None:
            raise LayoutError(f"{block.kind.name} results need row_offsets")
        pos = _put(buf, pos, np.asarray(block.row_offsets, np.int32))
    if block.kind == ResultKind.SPARSE:
        if block.indices is None:
            raise LayoutError("SPARSE results need indices")
        pos = _put(buf, pos, np.asarray(block.indices, np.int32))
    pos = _put(buf, pos, np.ascontiguousarray(block.values))
    buf[pos : pos + len(message)] = np.frombuffer(message, np.uint8)
    return buf


def decode_result(buf: np.ndarray) -> ResultBlock:
    _check_message(buf)
    (req_id, status, kind_value, dtype_value, _, n, dim, n_rows, message_bytes, queue_us, infer_us,
     batch_items, batch_tokens) = _RESULT.unpack_from(buf)  # fmt: skip
    kind = ResultKind(kind_value)
    dtype = _NUMPY_DTYPES[ValueDType(dtype_value)]
    pos = 64
    item_index, pos = _take(buf, pos, np.int32, n)
    item_status, pos = _take(buf, pos, np.uint8, n)
    row_offsets = indices = None
    if _has_row_offsets(kind):
        row_offsets, pos = _take(buf, pos, np.int32, n + 1)
    if kind == ResultKind.SPARSE:
        indices, pos = _take(buf, pos, np.int32, n_rows)
    cols = _value_cols(kind, dim) if kind != ResultKind.NONE else 0
    flat, pos = _take(buf, pos, dtype, n_rows * cols)
    values = flat if kind == ResultKind.SPARSE else flat.reshape(n_rows, cols)
    if pos + message_bytes > len(buf):
        raise LayoutError("result message overruns its buffer")
    return ResultBlock(
        req_id=req_id,
        kind=kind,
        item_index=item_index,
        item_status=item_status,
        values=values,
        dim=dim,
        status=Status(status),
        row_offsets=row_offsets,
        indices=indices,
        message=bytes(buf[pos : pos + message_bytes]).decode(errors="replace"),
        queue_us=queue_us,
        infer_us=infer_us,
        batch_items=batch_items,
        batch_tokens=batch_tokens,
    )


def _check_message(buf: np.ndarray) -> None:
    if buf.dtype != np.uint8 or buf.ndim != 1:
        raise LayoutError("messages are flat uint8 buffers")
    if len(buf) < 64:
        raise LayoutError(f"buffer of {len(buf)} bytes is shorter than a header")


def _put(buf: np.ndarray, pos: int, array: np.ndarray) -> int:
    raw = array.reshape(-1).view(np.uint8)
    buf[pos : pos + len(raw)] = raw
    return pos + _aligned(len(raw))


def _take(buf: np.ndarray, pos: int, dtype: type | np.dtype, count: int) -> tuple[np.ndarray, int]:
    itemsize = _itemsize(dtype)
    end = pos + itemsize * count
    if end > len(buf):
        raise LayoutError(f"array section [{pos}:{end}] overruns a {len(buf)}-byte buffer")
    return buf[pos:end].view(dtype), pos + _aligned(itemsize * count)


@functools.lru_cache(maxsize=32)
def _itemsize(dtype: type | np.dtype) -> int:
    return np.dtype(dtype).itemsize
