"""Media requests to a device: cut to fit the request ring, prepared off the event loop, pipelined.

Pixels and samples are large next to token ids, so a request's images or audio windows ("units")
go as several ring messages of at most 1/8 of the ring each, at most half a ring of them in
flight per request. Each message's units are decoded and resized on a worker thread (Pillow,
libsndfile and soxr release the GIL) just before it is sent, so decoding the next message
overlaps the device's work on the previous one (`workers.py`), and a request never holds more decoded pixels
than it has in flight. Prompt rows whose images each have a size of their own (Qwen3-VL,
LightOnOCR) carry them as bytes in the sample section (`pixel_rows_batch`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from sie.errors import InputTooLong
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

U = TypeVar("U")
MESSAGE_SHARE = 8
IN_FLIGHT_SHARE = 2
HEADER_ALLOWANCE = 4096  # offsets, token ids and alignment beside the media bytes


@dataclass(frozen=True, slots=True)
class Prepared:
    batch: TokenBatch
    meta: list[Any]  # one entry per unit (original image size, window duration, ...)


@dataclass(frozen=True, slots=True)
class MediaResults(Generic[U]):
    """Every unit's results, message by message in unit order, with the stage timings."""

    parts: list[tuple[Results, list[Any]]]  # (the message's results, its units' meta)
    prepare_ms: float  # decoding and resizing, summed over messages
    queue_ms: float
    inference_ms: float


def plan_messages(n_units: int, unit_bytes: int, ring_bytes: int) -> list[slice]:
    """Consecutive runs of units, each within 1/MESSAGE_SHARE of the ring (at least one unit)."""
    if unit_bytes + HEADER_ALLOWANCE > ring_bytes:
        raise InputTooLong(
            f"One input needs {unit_bytes} bytes of device queue, more than its {ring_bytes}; "
            "raise --request-ring-bytes"
        )
    per_message = max(1, (ring_bytes // MESSAGE_SHARE - HEADER_ALLOWANCE) // max(1, unit_bytes))
    return [slice(start, min(start + per_message, n_units)) for start in range(0, n_units, per_message)]


async def submit_units(
    state: FrontendState,
    units: Sequence[U],
    unit_bytes: int,
    prepare: Callable[[Sequence[U]], Prepared],
) -> MediaResults[U]:
    """Prepare and submit every unit; the first failure cancels the messages still under way."""
    ring_bytes = state.settings.request_ring_bytes
    slices = plan_messages(len(units), unit_bytes, ring_bytes)
    message_bytes = (slices[0].stop - slices[0].start) * unit_bytes
    gate = asyncio.Semaphore(max(1, (ring_bytes // IN_FLIGHT_SHARE) // max(1, message_bytes)))

    async def one(part: slice) -> tuple[Results, list[Any], float]:
        async with gate:
            started = time.perf_counter()
            prepared = await state.media.run(prepare, units[part])
            prepare_ms = (time.perf_counter() - started) * 1000
            results = await state.devices.submit(prepared.batch)
        return results, prepared.meta, prepare_ms

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(part)) for part in slices]
    except ExceptionGroup as failed:  # the first error is the request's answer (a 400, a 503, ...)
        raise failed.exceptions[0] from None
    done = [task.result() for task in tasks]
    return MediaResults(
        parts=[(results, meta) for results, meta, _ in done],
        prepare_ms=sum(ms for _, _, ms in done),
        queue_ms=max(results.queue_ms for results, _, _ in done),
        inference_ms=sum(results.inference_ms for results, _, _ in done),
    )


def pixel_rows_batch(
    input_ids: Sequence[np.ndarray],
    aux: Sequence[np.ndarray],
    pixels: Sequence[Sequence[np.ndarray]],
    *,
    op: Op,
    kind: ResultKind,
    slot: int,
    key: int,
) -> TokenBatch:
    """Prompt rows whose images have sizes of their own: each row's ids and `aux`, and its resized
    RGB images, in prompt order, as bytes in the message's sample section (the fixed-size pixel
    section cannot carry them)."""
    offsets = np.zeros(len(input_ids) + 1, np.int32)
    np.cumsum([len(ids) for ids in input_ids], out=offsets[1:])
    words = [as_words(images) for images in pixels]
    sample_offsets = np.zeros(len(words) + 1, np.int32)
    np.cumsum([len(w) for w in words], out=sample_offsets[1:])
    return TokenBatch(
        req_id=0,
        op=op,
        model_slot=slot,
        offsets=offsets,
        input_ids=np.concatenate(input_ids),
        output_mask=mask_of({kind}),
        config_key=key,
        aux=np.concatenate(aux),
        samples=np.concatenate(words),
        sample_offsets=sample_offsets,
    )


def as_words(pixels: Sequence[np.ndarray]) -> np.ndarray:
    """A row's images as bytes in float32 words (the sample section's unit), zero-padded to 4."""
    data = np.concatenate([np.ascontiguousarray(p, np.uint8).reshape(-1) for p in pixels])
    padded = np.zeros(-(-len(data) // 4) * 4, np.uint8)
    padded[: len(data)] = data
    return padded.view(np.float32)
