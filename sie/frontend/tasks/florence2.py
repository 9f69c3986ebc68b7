"""The extract task for Florence-2: per image item, its task's answer as entities or objects.

Each item carries one image, decoded and resized here to the processor's square (a batch of them
stacks with no padding), and its prompt's tokens after the generation header the device reads
(max new tokens, beam count: `sie.gpu_proc.adapters.florence2.HEADER`); the batch key carries the
header, so a device batch shares one. The device returns the generated token ids; they are
decoded and parsed here (`sie.frontend.florence2_parse`) with the original image's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.florence2 import Florence2Text, Generation, generation_of, item_prompt
from sie.frontend.florence2_parse import answer_of
from sie.frontend.media.submit import Prepared, submit_units
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob, instruction_of
from sie.frontend.tasks.images import ImageUnit, decode_pixels, image_units, pixel_bytes, spec_of
from sie.frontend.wire import Item
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of


async def run_florence2(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    spec = spec_of(state, config)
    model = state.tokenizers.built(
        config,
        "florence2",
        lambda: Florence2Text.for_model(resolve_weights_dir(config), resolve_tokenizer_file(config), spec),
    )
    generation = generation_of(job.options, target.runtime, model.max_positions)
    units = _units(job.items)
    instruction = instruction_of(job)
    asked = [item_prompt(generation.task, instruction, job.labels, item.text) for item in job.items]
    prompts = [model.prompt_ids(a.prompt, f"Item {i}") for i, a in enumerate(asked)]
    admit(state, target, len(units))
    slot, key = target.slot, generation_key(target.profile_name, generation)
    max_pixels = state.settings.max_image_pixels

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pixels, sizes = decode_pixels(part, spec, max_pixels)
        ids = [request_ids(generation, prompts[unit.item]) for unit in part]
        offsets = np.zeros(len(ids) + 1, np.int32)
        np.cumsum([len(i) for i in ids], out=offsets[1:])
        batch = TokenBatch(
            req_id=0,
            op=Op.EXTRACT,
            model_slot=slot,
            offsets=offsets,
            input_ids=np.concatenate(ids),
            output_mask=mask_of({ResultKind.TOKENS}),
            config_key=key,
            pixels=pixels,
        )
        return Prepared(batch, sizes)

    longest = max(len(request_ids(generation, p)) for p in prompts)
    submitted = await submit_units(state, units, pixel_bytes(spec) + 4 * longest, prepare)
    generated = [
        (row[:, 0].astype(np.int64).tolist(), size)
        for results, sizes in submitted.parts
        for row, size in zip(results.ragged[ResultKind.TOKENS], sizes, strict=True)
    ]
    answers = [
        answer_of(model.text(ids), prompt.task, size, model.rules)
        for (ids, size), prompt in zip(generated, asked, strict=True)
    ]
    return Extracted(
        entities=[a.entities for a in answers],
        classifications=[[] for _ in answers],
        objects=[a.objects for a in answers],
        tokenization_ms=submitted.prepare_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def request_ids(generation: Generation, prompt: np.ndarray) -> np.ndarray:
    """An item's ids on the ring: the generation header, then its prompt."""
    header = np.array([generation.max_new_tokens, generation.num_beams], np.int32)
    return np.concatenate([header, prompt]).astype(np.int32)


def generation_key(profile: str, generation: Generation) -> int:
    """Items share a device batch only with the same generation settings."""
    return config_key(profile, f"max_new_tokens={generation.max_new_tokens}", f"beams={generation.num_beams}")


def _units(items: Sequence[Item]) -> list[ImageUnit]:
    for index, item in enumerate(items):
        if item.images and len(item.images) > 1:
            raise InvalidInput(
                f"Item {index} has {len(item.images)} images; Florence-2 reads one image per item"
            )
    return image_units(range(len(items)), [item.images or [] for item in items], 1)
