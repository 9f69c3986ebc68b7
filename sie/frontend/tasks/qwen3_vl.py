"""Qwen3-VL rows on a device: one result row per prompt (sie.frontend.qwen3_vl builds them).

Rows without images go as token ids, as any text model's items do. Rows with images go through
the media path (`media/submit.py`): each message's images are decoded and resized on a media
thread just before it is sent, and a row's images travel as their resized RGB bytes in the
message's sample section (sie.gpu_proc.adapters.qwen3_vl reads them back), sized by their headers
beforehand so a message fits the ring.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sie.frontend.media.submit import Prepared, pixel_rows_batch, submit_units
from sie.frontend.pipeline import submit, tokenize
from sie.frontend.qwen3_vl import Qwen3VLRecipe, Row
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tokenize import Encoded
from sie.shm.layout import Op, ResultKind

_TOKEN_BYTES = 8  # an id and its aux value


@dataclass(frozen=True, slots=True)
class Ran:
    values: np.ndarray  # float32 [n_rows, dim], row order
    input_tokens: int  # prompt tokens read, image placeholders aside
    prepare_ms: float  # tokenizing, decoding and resizing
    queue_ms: float
    inference_ms: float


async def run_rows(
    state: FrontendState,
    target: Target,
    recipe: Qwen3VLRecipe,
    rows: Sequence[Row],
    *,
    op: Op,
    kind: ResultKind,
    limit: int,
) -> Ran:
    """Every row's result; the caller has admitted the request."""
    text_at = [i for i, row in enumerate(rows) if not row.images]
    image_at = [i for i, row in enumerate(rows) if row.images]
    parts = await asyncio.gather(
        _text_rows(state, target, recipe, [rows[i] for i in text_at], op, kind, limit),
        _image_rows(state, target, recipe, [rows[i] for i in image_at], op, kind, limit),
    )
    dim = max(part.values.shape[1] for part in parts if len(part.values))
    values = np.empty((len(rows), dim), np.float32)
    for positions, part in zip((text_at, image_at), parts, strict=True):
        if positions:
            values[positions] = part.values
    return Ran(
        values=values,
        input_tokens=sum(part.input_tokens for part in parts),
        prepare_ms=sum(part.prepare_ms for part in parts),
        queue_ms=max(part.queue_ms for part in parts),
        inference_ms=sum(part.inference_ms for part in parts),
    )


async def _text_rows(
    state: FrontendState,
    target: Target,
    recipe: Qwen3VLRecipe,
    rows: list[Row],
    op: Op,
    kind: ResultKind,
    limit: int,
) -> Ran:
    if not rows:
        return Ran(np.empty((0, 0), np.float32), 0, 0.0, 0.0, 0.0)
    tokens, tokenization_ms = await tokenize(
        lambda: [recipe.tokens(row, [], limit) for row in rows], len(rows)
    )
    encoded = Encoded.from_rows([t.input_ids for t in tokens])
    submitted = await submit(state, target, encoded, op=op, kinds={kind}, tokenization_ms=tokenization_ms)
    return Ran(
        submitted.results.rows[kind],
        sum(t.text_tokens for t in tokens),
        tokenization_ms,
        submitted.queue_ms,
        submitted.inference_ms,
    )


async def _image_rows(
    state: FrontendState,
    target: Target,
    recipe: Qwen3VLRecipe,
    rows: list[Row],
    op: Op,
    kind: ResultKind,
    limit: int,
) -> Ran:
    if not rows:
        return Ran(np.empty((0, 0), np.float32), 0, 0.0, 0.0, 0.0)
    started = time.perf_counter()
    unit_bytes = await state.media.run(_largest_row_bytes, recipe, rows, limit)
    sizing_ms = (time.perf_counter() - started) * 1000
    slot, key, max_pixels = target.slot, target.batch_key(), state.settings.max_image_pixels

    def prepare(part: Sequence[Row]) -> Prepared:
        tokens = [
            recipe.tokens(row, [recipe.picture(p, max_pixels) for p in row.images], limit) for row in part
        ]
        batch = pixel_rows_batch(
            [t.input_ids for t in tokens],
            [t.aux for t in tokens],
            [t.pixels for t in tokens],
            op=op,
            kind=kind,
            slot=slot,
            key=key,
        )
        return Prepared(batch, [t.text_tokens for t in tokens])

    submitted = await submit_units(state, rows, unit_bytes, prepare)
    return Ran(
        np.concatenate([results.rows[kind] for results, _ in submitted.parts]),
        sum(n for _, meta in submitted.parts for n in meta),
        sizing_ms + submitted.prepare_ms,
        submitted.queue_ms,
        submitted.inference_ms,
    )


def _largest_row_bytes(recipe: Qwen3VLRecipe, rows: Sequence[Row], limit: int) -> int:
    """A bound on any row's message bytes: its resized pixels, and ids for each byte of its
    prompt (a token is one byte at least) and each of its image placeholders, `limit` at most."""
    return max(_row_bytes(recipe, row, limit) for row in rows)


def _row_bytes(recipe: Qwen3VLRecipe, row: Row, limit: int) -> int:
    pixels = sum(recipe.resized_bytes(p) for p in row.images)
    placeholders = pixels // (3 * recipe.spec.factor**2)
    return pixels + _TOKEN_BYTES * min(limit, len(row.prompt.encode()) + placeholders)
