"""Qwen3-VL-Reranker's score runner (family `qwen3_vl_reranker`): one score per (query, item) pair.

Each pair is one chat prompt (sie.qwen3_vl) holding the instruction, the query's image and text and
the item's image and text; the score is sigmoid(yes - no) of the logits the device returns for it.
As SIE's adapter asks: a query or item carries nonblank text or one image (not several), and no
text may hold the tokenizer's special tokens. The instruction is the request's, else the profile's
`instruction`, else its `default_instruction`, else "Retrieve relevant documents for the query.".
A prompt over the limit (`options.max_seq_length`, at most the model's) loses document tokens from
the end. The query's image is decoded once for all pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sie import qwen3_vl as recipe
from sie.errors import InvalidInput
from sie.frontend.pipeline import admit
from sie.frontend.qwen3_vl import Picture, Qwen3VLRecipe, Row, check_text, recipe_of, row_limit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.images import ImageUnit
from sie.frontend.tasks.qwen3_vl import run_rows
from sie.frontend.tasks.score import Scored
from sie.frontend.wire import Item
from sie.shm.layout import Op, ResultKind


async def score(
    state: FrontendState,
    target: Target,
    query: Item,
    items: list[Item],
    instruction: str | None,
    options: dict[str, Any] | None,
) -> Scored:
    """The family's score runner: `items` in request order, scored against `query`."""
    admit(state, target, len(items))
    vl = recipe_of(state, target)
    limit = row_limit((options or {}).get("max_seq_length"), vl.limit)
    _check(vl, query, "Query")
    for index, item in enumerate(items):
        _check(vl, item, f"Item {index}")
    runtime = target.runtime
    asked = next(
        (text for text in (instruction, runtime.instruction, runtime.default_instruction) if text),
        recipe.RERANK_DEFAULT_INSTRUCTION,
    )
    query_image = await _query_picture(state, vl, query)
    rows = [_row(asked, query, query_image, index, item) for index, item in enumerate(items)]
    ran = await run_rows(state, target, vl, rows, op=Op.SCORE, kind=ResultKind.SCORES, limit=limit)
    no, yes = ran.values[:, 0].astype(np.float64), ran.values[:, 1].astype(np.float64)
    scores = (1.0 / (1.0 + np.exp(no - yes))).astype(np.float32)
    return Scored(scores, ran.input_tokens, ran.prepare_ms, ran.queue_ms, ran.inference_ms)


def _check(vl: Qwen3VLRecipe, item: Item, where: str) -> None:
    images = item.images or []
    if len(images) > 1:
        raise InvalidInput(
            f"{where} has {len(images)} images; this reranker reads at most one per query or item"
        )
    if not images and not (item.text and item.text.strip()):
        raise InvalidInput(f"{where} needs nonblank text or one image")
    check_text(item.text, where, vl.reserved)


async def _query_picture(state: FrontendState, vl: Qwen3VLRecipe, query: Item) -> np.ndarray | None:
    if not query.images:
        return None
    image = query.images[0]
    max_pixels = state.settings.max_image_pixels
    pixels: np.ndarray = await state.media.run(
        vl.decoded, image.data, image.format, "Query image 0", max_pixels
    )
    return pixels


def _row(instruction: str, query: Item, query_image: np.ndarray | None, index: int, item: Item) -> Row:
    has_image = bool(item.images)
    prompt, start = recipe.reranker_prompt(
        instruction, query.text, query_image is not None, item.text, has_image
    )
    images: list[Picture] = [] if query_image is None else [query_image]
    if item.images:
        images.append(ImageUnit(index, 0, item.images[0].data, item.images[0].format))
    return Row(f"Item {index}", prompt, start, start + len(item.text or ""), tuple(images))
