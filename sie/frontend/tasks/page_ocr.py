"""The extract task for the page OCR models (LightOnOCR-2 and -3, GLM-OCR, PaddleOCR-VL, MinerU2.5):
each item's page transcribed (to Markdown, or what its task asks for), one entity per item.

Each item carries one page image. Its prompt (sie.frontend.page_ocr) goes after a generation
header (max new tokens, temperature, top_p: `sie.page_ocr.Generation`), and the batch key carries
the header, so a device batch shares it. The page travels as its resized RGB bytes in the message's sample
section, its width in pixels in `aux` on its image tokens. The device returns the generated ids,
decoded here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.media.images import decode_image, resized_size
from sie.frontend.media.submit import Prepared, pixel_rows_batch, submit_units
from sie.frontend.page_ocr import OcrProfile, PageOcrRecipe
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob, instruction_of
from sie.frontend.tasks.images import ImageUnit, image_units
from sie.frontend.wire import Item
from sie.page_ocr import (
    GLM_OCR,
    LIGHTON_OCR,
    LIGHTON_OCR3,
    MINERU_VL,
    PADDLEOCR_VL,
    Generation,
    OcrFamily,
)
from sie.shm.layout import Op, ResultKind

_TOKEN_BYTES = 8  # an id and its aux value


async def run_lighton_ocr(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, LIGHTON_OCR)


async def run_lighton_ocr3(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, LIGHTON_OCR3)


async def run_glm_ocr(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, GLM_OCR)


async def run_paddleocr_vl(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, PADDLEOCR_VL)


async def run_mineru_vl(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    return await _run(state, target, job, MINERU_VL)


async def _run(state: FrontendState, target: Target, job: ExtractJob, family: OcrFamily) -> Extracted:
    config = target.config
    # Built once, off the event loop: it reads the tokenizer and imports transformers' renderer.
    model = await asyncio.to_thread(
        state.tokenizers.built, config, "page_ocr", lambda: PageOcrRecipe.for_model(config, family)
    )
    profile = model.profile(target.profile_name)  # profiles may differ in prompts and decoding
    ceiling = target.runtime.max_new_tokens or profile.max_new_tokens or family.max_new_tokens
    max_new_tokens = _max_new_tokens(job.options, ceiling)
    if job.options.get("num_beams", 1) != 1:
        raise InvalidInput(f"options.num_beams: {family.name} decodes with one beam (num_beams 1)")
    generation = _generation(job.options, max_new_tokens, profile)
    instruction = instruction_of(job)
    profile.check_instruction(instruction, family.name)
    task = profile.task(job.options.get("task", target.runtime.task), "options.task")
    label = profile.label(task)
    units = _units(job.items, family)
    prompt = model.prompt(instruction, "params.instruction", task, profile=target.profile_name)
    prompt_ids = model.prompt_ids(prompt, "params.instruction")
    admit(state, target, len(units))
    slot, key = target.slot, config_key(target.profile_name, generation.key())
    max_pixels = state.settings.max_image_pixels
    header = generation.header()

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pages = []
        for unit in part:
            pixels = decode_image(unit.data, unit.format, max_pixels, unit.where).pixels
            pages.append(model.tokens(prompt_ids, model.resized(pixels, unit.where), unit.where))
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

    # Each page's size read from its header bounds its message share (the largest page otherwise).
    page_bytes = await state.media.run(_largest_page_bytes, model, units, len(prompt_ids))
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


def _largest_page_bytes(model: PageOcrRecipe, units: Sequence[ImageUnit], prompt_tokens: int) -> int:
    """A bound on any item's message bytes: its resized pixels and an id and aux value for each
    token of its prompt, image tokens included."""
    pages = model.pages
    largest = 0
    for unit in units:
        size = resized_size(unit.data, pages.resized)
        if size is None:
            area, tokens = pages.largest_area, pages.most_image_tokens
        else:
            area, tokens = size[0] * size[1], pages.image_tokens(*size)
        largest = max(largest, area * 3 + _TOKEN_BYTES * (prompt_tokens + tokens))
    return largest


def _transcript(text: str, label: str) -> dict[str, Any]:
    """SIE's entity for a page: its transcript, edge whitespace trimmed, no offsets."""
    return {"text": text.strip(), "label": label, "score": 1.0, "start": None, "end": None, "bbox": None}


def _generation(options: dict[str, Any], max_new_tokens: int, chosen: OcrProfile) -> Generation:
    """Greedy, or (for a profile that samples) sampling at the request's or the profile's
    temperature and top_p."""
    if chosen.temperature <= 0:
        return Generation(max_new_tokens)
    temperature = _positive(options.get("temperature", chosen.temperature), "options.temperature")
    top_p = _positive(options.get("top_p", chosen.top_p), "options.top_p")
    if top_p > 1:
        raise InvalidInput("options.top_p must be at most 1")
    return Generation(max_new_tokens, temperature, top_p)


def _positive(value: object, where: str) -> float:
    """A positive finite number as a float (a JSON integer too large for one is refused, not raised)."""
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not 0 < number < math.inf:
        raise InvalidInput(f"{where} must be a positive finite number")
    return number


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
