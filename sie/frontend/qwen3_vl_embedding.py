"""Qwen3-VL-Embedding's encode runner (family `qwen3_vl_embedding`): one vector per item.

Each item is one chat prompt (sie.qwen3_vl): the instruction as the system turn, the item's
images then its text as the user turn. The instruction is the request's, else the profile's
`instruction`, else its `default_instruction`, else "Represent the user's input.", for queries and
documents alike (SIE's adapter reads no `is_query`); the profile's query and document templates do
not apply, the chat template is the prompt. The device pools the final hidden states (the
profile's pooling: the last token); the vector is normalized here unless the request or profile
says not to.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sie import qwen3_vl as recipe
from sie.errors import InvalidInput
from sie.frontend.pipeline import admit
from sie.frontend.postprocess import l2_normalize
from sie.frontend.qwen3_vl import Row, check_text, recipe_of
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.frontend.tasks.images import ImageUnit
from sie.frontend.tasks.qwen3_vl import run_rows
from sie.frontend.wire import Item
from sie.model_config import RuntimeOptions
from sie.shm.layout import Op, ResultKind


async def embed(
    state: FrontendState, target: Target, items: Sequence[Item], texts: list[str], options: EmbedOptions
) -> Embedded:
    """The family's encode runner (`texts`, the templated texts, are not read: see above)."""
    admit(state, target, len(items))
    vl = recipe_of(state, target)
    instruction = instruction_of(options.instruction, target.runtime)
    max_images = state.settings.max_images_per_item
    rows = [_row(i, item, instruction, max_images) for i, item in enumerate(items)]
    ran = await run_rows(state, target, vl, rows, op=Op.ENCODE, kind=ResultKind.DENSE, limit=vl.limit)
    started = time.perf_counter()
    normalize = target.runtime.normalize if options.normalize is None else options.normalize
    dense = l2_normalize(ran.values) if normalize else ran.values
    return Embedded(
        dense=dense,
        sparse=None,
        multivector=None,
        sparse_dims=0,
        input_tokens=ran.input_tokens,
        tokenization_ms=ran.prepare_ms,
        queue_ms=ran.queue_ms,
        inference_ms=ran.inference_ms,
        postprocessing_ms=(time.perf_counter() - started) * 1000,
    )


def instruction_of(requested: str | None, runtime: RuntimeOptions) -> str:
    """SIE's system turn: the first instruction given, normalized; blank ones fall through."""
    for candidate in (requested, runtime.instruction, runtime.default_instruction):
        normalized = recipe.normalize_instruction(candidate or "")
        if normalized:
            return normalized
    return recipe.EMBED_DEFAULT_INSTRUCTION


def _row(index: int, item: Item, instruction: str, max_images: int) -> Row:
    images = item.images or []
    if len(images) > max_images:
        raise InvalidInput(f"Item {index} has {len(images)} images; at most {max_images} per item")
    # Vision tokens in the text would read as image placeholders.
    check_text(item.text, f"Item {index}", set(recipe.VISION_TOKENS))
    prompt, start = recipe.embedding_prompt(instruction, len(images), item.text)
    units = tuple(ImageUnit(index, j, image.data, image.format) for j, image in enumerate(images))
    return Row(f"Item {index}", prompt, start, start + len(item.text or ""), units)
