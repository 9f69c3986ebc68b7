"""The extract task for images with an open-vocabulary detector (OWLv2): `objects` per item.

`params.labels` are the queries; each item carries one image. The device returns, per patch of
the padded square input, a box and its best label's logit; here, as `transformers`'
`post_process_object_detection`: score = sigmoid(logit), kept when above `options.threshold`
(default 0.1), the box turned to corners [x0, y0, x1, y1] and scaled by the padded square's side,
which is the longer side of the original image, so boxes are in the original image's pixels.
Objects come best first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sie.frontend.media.submit import MediaResults, Prepared, submit_units
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob, threshold_option
from sie.frontend.tasks.images import ImageUnit, decode_pixels, one_image_per_item, pixel_bytes, spec_of
from sie.model_config import ModelConfig
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

DEFAULT_THRESHOLD = 0.1


async def detect(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = job.labels or []
    units = one_image_per_item(job.items)
    admit(state, target, len(units))
    slot = target.slot
    threshold = threshold_option(job.options, target.runtime.threshold, default=DEFAULT_THRESHOLD)
    spec = spec_of(state, config)
    queries, owners = _queries(state, config, labels)
    key = config_key(target.profile_name)
    max_pixels = state.settings.max_image_pixels

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pixels, sizes = decode_pixels(part, spec, max_pixels)
        n = len(part)
        batch = TokenBatch(
            req_id=0,
            op=Op.EXTRACT,
            model_slot=slot,
            offsets=(np.arange(n + 1) * len(queries)).astype(np.int32),
            input_ids=np.tile(queries, n),
            aux=np.tile(owners, n),
            output_mask=mask_of({ResultKind.BOXES}),
            config_key=key,
            pixels=pixels,
        )
        return Prepared(batch, sizes)

    submitted = await submit_units(state, units, pixel_bytes(spec), prepare)
    objects = [
        objects_of(rows, size, labels, threshold)
        for results, sizes in submitted.parts
        for rows, size in zip(results.ragged[ResultKind.BOXES], sizes, strict=True)
    ]
    return detected(objects, submitted)


def detected(objects: list[list[dict[str, Any]]], submitted: MediaResults[Any]) -> Extracted:
    """A detection request's answer: each item's objects and no entities or classifications."""
    n = len(objects)
    return Extracted(
        entities=[[] for _ in range(n)],
        classifications=[[] for _ in range(n)],
        objects=objects,
        tokenization_ms=submitted.prepare_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def objects_of(
    rows: np.ndarray, size: tuple[int, int], labels: list[str], threshold: float
) -> list[dict[str, Any]]:
    """One image's patch rows [cx, cy, w, h, logit, label] -> objects above the threshold."""
    scores = 1.0 / (1.0 + np.exp(-rows[:, 4].astype(np.float64)))
    keep = np.flatnonzero(scores > threshold)
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    side = float(max(size))  # the processor padded the image to a square of its longer side
    cx, cy, w, h = (rows[keep, k].astype(np.float64) for k in range(4))
    corners = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1) * side
    return [
        {"label": labels[int(rows[i, 5])], "score": float(scores[i]), "corners": [float(v) for v in box]}
        for i, box in zip(keep.tolist(), corners, strict=True)
    ]


def _queries(state: FrontendState, config: ModelConfig, labels: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every label's tokens end to end, and which label each token belongs to (the aux section)."""
    encoded = state.tokenizers.get(config).encode(labels)
    owners = np.repeat(np.arange(len(labels), dtype=np.int32), np.diff(encoded.offsets))
    return encoded.input_ids, owners
