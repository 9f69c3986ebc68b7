"""The extract task for Grounding DINO: `objects` per image item for the request's labels.

Each item carries one image. It is decoded and resized here (its own size: the aspect is kept)
and goes to the device as its own message, with the labels' prompt as its tokens; the batch key
carries the resized size, so a device batch holds images of one size and no image is padded
(padding would change what the backbone sees, and so the boxes). `sie.frontend.grounding_dino`
turns the returned rows into objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sie.frontend.grounding_dino import GroundingPrompts, Thresholds, objects_of
from sie.frontend.media.detr import resize_detr
from sie.frontend.media.images import decode_image
from sie.frontend.media.submit import MESSAGE_SHARE, Prepared, submit_units
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.detect import detected
from sie.frontend.tasks.extract import Extracted, ExtractJob
from sie.frontend.tasks.images import ImageUnit, one_image_per_item, spec_of
from sie.frontend.wire import option_fraction
from sie.model_config import RuntimeOptions
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

DEFAULT_BOX_THRESHOLD = 0.25  # SIE's and transformers' defaults
DEFAULT_TEXT_THRESHOLD = 0.25


async def run_grounding_dino(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = job.labels or []
    units = one_image_per_item(job.items)
    admit(state, target, len(units))
    slot = target.slot
    thresholds = thresholds_of(job.options, target.runtime)
    prompts = state.tokenizers.built(
        config,
        "grounding-dino",
        lambda: GroundingPrompts.for_model(resolve_weights_dir(config), resolve_tokenizer_file(config)),
    )
    prompt = prompts.encode(labels)
    spec = spec_of(state, config)
    profile = target.profile_name
    max_pixels = state.settings.max_image_pixels

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        (unit,) = part  # one image a message: a message's pixels have one size
        decoded = decode_image(unit.data, unit.format, max_pixels, unit.where)
        pixels = resize_detr(decoded.pixels, spec)
        height, width = pixels.shape[:2]
        batch = TokenBatch(
            req_id=0,
            op=Op.EXTRACT,
            model_slot=slot,
            offsets=np.array([0, len(prompt)], np.int32),
            input_ids=prompt,
            output_mask=mask_of({ResultKind.BOXES}),
            config_key=config_key(profile, f"{height}x{width}"),  # same-size images batch together
            pixels=pixels[None],
        )
        return Prepared(batch, [(decoded.width, decoded.height)])

    # The largest resized image, or more: `submit_units` then puts one image in each message.
    largest = spec.height * spec.width * 3
    unit_bytes = max(largest, state.settings.request_ring_bytes // MESSAGE_SHARE)
    submitted = await submit_units(state, units, unit_bytes, prepare)
    objects = [
        objects_of(rows, prompt, size, labels, thresholds, prompts)
        for results, sizes in submitted.parts
        for rows, size in zip(results.ragged[ResultKind.BOXES], sizes, strict=True)
    ]
    return detected(objects, submitted)


def thresholds_of(options: dict[str, Any], runtime: RuntimeOptions) -> Thresholds:
    """The request's box/text thresholds, else the profile's, else 0.25 (`threshold` is the box's,
    as for OWLv2)."""
    box_default = DEFAULT_BOX_THRESHOLD if runtime.threshold is None else runtime.threshold
    text_default = DEFAULT_TEXT_THRESHOLD if runtime.text_threshold is None else runtime.text_threshold
    box = options.get("box_threshold", options.get("threshold", box_default))
    return Thresholds(
        box=option_fraction("box_threshold", box),
        text=option_fraction("text_threshold", options.get("text_threshold", text_default)),
    )
