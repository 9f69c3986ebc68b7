"""The extract task for Donut: SIE's entities per page image, from the model's generated fields.

Each item carries one page image. It is decoded and prepared here (`sie.frontend.media.donut`:
aligned, resized, padded to the processor's page) and goes to the device with the prompt's
tokens; the device generates, and the tokens come back to be decoded, parsed (token2json) and
turned into entities (`sie.frontend.donut`, `sie.frontend.donut_json`).

Options, each defaulting to the profile's runtime value: `task` (the task token, SIE's default
`<s_cord-v2>`), `max_new_tokens` (512), `num_beams` (1: decoding is greedy), and `instruction`
(the DocVQA question; `params.instruction` comes first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.donut import DonutText, prompt_of
from sie.frontend.donut_json import entities_of, token2json
from sie.frontend.media.donut import PageSpec, page_spec, prepare_page
from sie.frontend.media.images import decode_image
from sie.frontend.media.submit import MESSAGE_SHARE, Prepared, submit_units
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob
from sie.frontend.tasks.images import ImageUnit, image_units
from sie.frontend.wire import Item
from sie.model_config import RuntimeOptions
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

OPTIONS = frozenset({"task", "max_new_tokens", "num_beams", "instruction", "profile"})
DEFAULT_TASK = "<s_cord-v2>"  # SIE's adapter default
DEFAULT_MAX_NEW_TOKENS = 512


@dataclass(frozen=True, slots=True)
class DonutRequest:
    task: str
    question: str | None
    max_new_tokens: int


def donut_request(job: ExtractJob, runtime: RuntimeOptions) -> DonutRequest:
    """The request's task, question and generation length, checked; every problem is a 400."""
    options = job.options
    unknown = set(options) - OPTIONS
    if unknown:
        raise InvalidInput(f"Unsupported options for Donut: {', '.join(sorted(unknown))}")
    if job.labels:
        raise InvalidInput("Donut models take no params.labels")
    task = options.get("task", runtime.task or DEFAULT_TASK)
    if not isinstance(task, str) or not task.strip():
        raise InvalidInput("options.task must be a task token such as '<s_cord-v2>'")
    question = (
        job.instruction if job.instruction is not None else options.get("instruction", runtime.instruction)
    )
    if question is not None and not isinstance(question, str):
        raise InvalidInput("instruction must be a string")
    beams = options.get("num_beams", runtime.num_beams or 1)
    if beams != 1 or isinstance(beams, bool):
        raise InvalidInput("options.num_beams must be 1: Donut decodes greedily here")
    max_new = options.get("max_new_tokens", runtime.max_new_tokens or DEFAULT_MAX_NEW_TOKENS)
    if isinstance(max_new, bool) or not isinstance(max_new, int) or max_new < 1:
        raise InvalidInput("options.max_new_tokens must be a positive integer")
    return DonutRequest(task, question, max_new)


def one_page_per_item(items: Sequence[Item]) -> list[ImageUnit]:
    for index, item in enumerate(items):
        if item.images and len(item.images) > 1:
            raise InvalidInput(f"Item {index} has {len(item.images)} images; Donut reads one page per item")
    return image_units(range(len(items)), [item.images or [] for item in items], 1)


async def run_donut(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    request = donut_request(job, target.runtime)
    units = one_page_per_item(job.items)
    admit(state, target, len(units))
    folder = resolve_weights_dir(config)
    text = state.tokenizers.built(
        config, "donut", lambda: DonutText.for_model(folder, resolve_tokenizer_file(config))
    )
    spec = state.tokenizers.built(config, "donut-page", lambda: page_spec(folder))
    prompt = text.encode(prompt_of(request.task, request.question))
    max_new = min(request.max_new_tokens, text.max_positions)  # the device stops there anyway
    slot, profile, max_pixels = target.slot, target.profile_name, state.settings.max_image_pixels

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pages = [_page(unit, spec, max_pixels) for unit in part]
        height, width = pages[0].shape[:2]
        n = len(pages)
        batch = TokenBatch(
            req_id=0,
            op=Op.EXTRACT,
            model_slot=slot,
            offsets=(np.arange(n + 1) * len(prompt)).astype(np.int32),
            input_ids=np.tile(prompt, n),
            output_mask=mask_of({ResultKind.TOKENS}),
            config_key=config_key(profile, f"{height}x{width}", f"n={max_new}"),
            pixels=np.stack(pages),
            scalar=float(max_new),
        )
        return Prepared(batch, [None] * n)

    page_bytes = spec.height * spec.width * 3
    # Unpadded pages differ in size: one a message then, so a message's pixels stack.
    unit_bytes = (
        page_bytes if spec.do_pad else max(page_bytes, state.settings.request_ring_bytes // MESSAGE_SHARE)
    )
    submitted = await submit_units(state, units, unit_bytes, prepare)
    generated = [
        rows[:, 0].astype(np.int64).tolist()
        for results, _ in submitted.parts
        for rows in results.ragged[ResultKind.TOKENS]
    ]
    entities = [
        entities_of(token2json(text.sequence(prompt, ids), text.added), request.task) for ids in generated
    ]
    return Extracted(
        entities=entities,
        classifications=[[] for _ in entities],
        tokenization_ms=submitted.prepare_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def _page(unit: ImageUnit, spec: PageSpec, max_pixels: int) -> np.ndarray:
    return prepare_page(decode_image(unit.data, unit.format, max_pixels, unit.where).pixels, spec, max_pixels)
