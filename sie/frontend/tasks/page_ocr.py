"""The extract task for the page OCR models (LightOnOCR-2, GLM-OCR, PaddleOCR-VL): each item's page
transcribed (to Markdown, or PaddleOCR-VL's spotting and seal text), one entity per item.

Each item carries one page image. Its prompt (sie.frontend.page_ocr) goes after a generation
header (the item's max new tokens: `sie.page_ocr.HEADER`), and the batch key carries the header,
so a device batch shares it. The page travels as its resized RGB bytes in the message's sample
section, its width in pixels in `aux` on its image tokens. The device returns the generated ids,
decoded here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.media.images import decode_image
from sie.frontend.media.submit import Prepared, pixel_rows_batch, submit_units
from sie.frontend.page_ocr import PageOcrRecipe
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob, instruction_of
from sie.frontend.tasks.images import ImageUnit, image_units
from sie.frontend.wire import Item
from sie.page_ocr import GLM_OCR, LIGHTON_OCR, PADDLEOCR_VL, OcrFamily
from sie.shm.layout import Op, ResultKind

_TOKEN_BYTES = 8  # an id and its aux value


async def run_lighton_ocr(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, LIGHTON_OCR)


async def run_glm_ocr(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, GLM_OCR)


async def run_paddleocr_vl(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, PADDLEOCR_VL)


async def _run(state: FrontendState, target: Target, job: ExtractJob, family: OcrFamily) -> Extracted:
    config = target.config
    # Built once, off the event loop: it reads the tokenizer and imports transformers' renderer.
    profile = target.profile_name  # profiles may differ in their prompts
    model = await asyncio.to_thread(
        state.tokenizers.derived,
        config,
        f"page_ocr:{profile}",
        lambda _: PageOcrRecipe.for_model(config, family, profile),
    )
    max_new_tokens = _max_new_tokens(job.options, target.runtime.max_new_tokens or family.max_new_tokens)
    if job.options.get("num_beams", 1) != 1:
        raise InvalidInput(f"options.num_beams: {family.name} decodes greedily here (num_beams 1)")
    instruction = instruction_of(job)
    task = model.prompts.task(job.options.get("task", target.runtime.task), "options.task")
    label = model.prompts.label(task)
    units = _units(job.items, family)
    prompt = model.prompt(instruction, "params.instruction", task)
    admit(state, target, len(units))
    slot, key = target.slot, config_key(target.profile_name, f"max_new_tokens={max_new_tokens}")
    max_pixels = state.settings.max_image_pixels
    header = np.array([max_new_tokens], np.int32)

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pages = []
        for unit in part:
            pixels = decode_image(unit.data, unit.format, max_pixels, unit.where).pixels
            pages.append(model.tokens(prompt, model.resized(pixels, unit.where), unit.where))
        batch = pixel_rows_batch(
            [np.concatenate([header, page.input_ids]) for page in pages],
            [np.concatenate([np.zeros(len(header), np.int32), page.aux]) for page in pages],
            [[page.pixels] for page in pages],
            op=Op.EXTRACT,
            kind=ResultKind.TOKENS,
            slot=slot,
            key=key,
        )
        return Prepared(batch, [page.text_tokens for page in pages])

    # The largest page's bytes and image tokens bound an item.
    pages = model.pages
    page_bytes = pages.largest_area * 3 + _TOKEN_BYTES * (len(prompt.encode()) + pages.most_image_tokens)
    submitted = await submit_units(state, units, page_bytes, prepare)
    texts = [
        model.text(row[:, 0].astype(np.int64).tolist())
        for results, _ in submitted.parts
        for row in results.ragged[ResultKind.TOKENS]
    ]
    return Extracted(
        entities=[[_transcript(text, label)] for text in texts],
        classifications=[[] for _ in texts],
        input_tokens=sum(n for _, meta in submitted.parts for n in meta),
        tokenization_ms=submitted.prepare_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def _transcript(text: str, label: str) -> dict[str, Any]:
    """SIE's entity for a page: its transcript, edge whitespace trimmed, no offsets."""
    return {"text": text.strip(), "label": label, "score": 1.0, "start": None, "end": None, "bbox": None}


def _max_new_tokens(options: dict[str, Any], ceiling: int) -> int:
    value = options.get("max_new_tokens", ceiling)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
        raise InvalidInput(f"options.max_new_tokens must be an integer from 1 to {ceiling}")
    return value


def _units(items: Sequence[Item], family: OcrFamily) -> list[ImageUnit]:
    for index, item in enumerate(items):
        count = len(item.images or [])
        if count != 1:
            raise InvalidInput(
                f"Item {index} has {count} images; {family.name} reads one page image per item"
            )
    return image_units(range(len(items)), [item.images or [] for item in items], 1)
