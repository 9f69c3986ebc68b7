"""The encode task's image path (CLIP, SigLIP): one vector per item, from its images.

Each image is its own device item (cost 1, the pixels already at the model's size). An item with
several images gets the mean of their normalized vectors, normalized again (SIE averages too; the
second normalization keeps every returned vector unit-length when the model normalizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.media.images import decode_image, preprocess
from sie.frontend.media.submit import Prepared, submit_units
from sie.frontend.pipeline import admit
from sie.frontend.postprocess import l2_normalize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.wire import ImageInput, Item
from sie.media_config import ImageSpec, image_spec
from sie.model_config import ModelConfig
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of


@dataclass(frozen=True, slots=True)
class ImageUnit:
    """One image of a request, with where it came from (for results and error messages)."""

    item: int  # the item's position in the request
    image: int  # the image's position in the item
    data: bytes
    format: str | None

    @property
    def where(self) -> str:
        return f"Item {self.item} image {self.image}"


@dataclass(frozen=True, slots=True)
class ImageVectors:
    dense: np.ndarray  # [n_items, dim] float32
    n_images: int
    prepare_ms: float
    queue_ms: float
    inference_ms: float


def image_units(
    positions: Sequence[int], images: Sequence[list[ImageInput]], max_per_item: int
) -> list[ImageUnit]:
    """Every image of the given items, in order; more than `max_per_item` on one item is a 400."""
    units = []
    for position, item_images in zip(positions, images, strict=True):
        if len(item_images) > max_per_item:
            raise InvalidInput(
                f"Item {position} has {len(item_images)} images; at most {max_per_item} per item"
            )
        units.extend(ImageUnit(position, j, image.data, image.format) for j, image in enumerate(item_images))
    return units


def one_image_per_item(items: Sequence[Item]) -> list[ImageUnit]:
    """Detection's units: each item's one image (more than one is a 400)."""
    for index, item in enumerate(items):
        if item.images and len(item.images) > 1:
            raise InvalidInput(
                f"Item {index} has {len(item.images)} images; detection reads one image per item"
            )
    return image_units(range(len(items)), [item.images or [] for item in items], 1)


def spec_of(state: FrontendState, config: ModelConfig) -> ImageSpec:
    return state.tokenizers.built(
        config, "image-spec", lambda: image_spec(resolve_weights_dir(config), config.family)
    )


def pixel_bytes(spec: ImageSpec) -> int:
    return spec.height * spec.width * 3 * (4 if spec.float_pixels else 1)


def decode_pixels(
    units: Sequence[ImageUnit], spec: ImageSpec, max_pixels: int
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """[n, H, W, 3] pixels of the units and each original (width, height); runs on a worker thread."""
    pixels, sizes = [], []
    for unit in units:
        decoded = decode_image(unit.data, unit.format, max_pixels, unit.where)
        pixels.append(preprocess(decoded.pixels, spec))
        sizes.append((decoded.width, decoded.height))
    return np.stack(pixels), sizes


async def embed_images(
    state: FrontendState,
    target: Target,
    positions: Sequence[int],
    images: Sequence[list[ImageInput]],
    *,
    normalize: bool,
) -> ImageVectors:
    """One vector per item from its images (items at `positions` of the request)."""
    units = image_units(positions, images, state.settings.max_images_per_item)
    admit(state, target, len(units))
    spec = spec_of(state, target.config)
    slot, key = target.slot, config_key(target.profile_name)  # the image tower takes no LoRA adapter
    max_pixels = state.settings.max_image_pixels

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pixels, sizes = decode_pixels(part, spec, max_pixels)
        batch = TokenBatch(
            req_id=0,
            op=Op.ENCODE,
            model_slot=slot,
            offsets=np.zeros(len(part) + 1, np.int32),
            input_ids=np.zeros(0, np.int32),
            output_mask=mask_of({ResultKind.DENSE}),
            config_key=key,
            pixels=pixels,
        )
        return Prepared(batch, sizes)

    submitted = await submit_units(state, units, pixel_bytes(spec), prepare)
    rows = np.concatenate([results.rows[ResultKind.DENSE] for results, _ in submitted.parts])
    return ImageVectors(
        dense=_per_item(rows, [unit.item for unit in units], normalize),
        n_images=len(units),
        prepare_ms=submitted.prepare_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def _per_item(rows: np.ndarray, owners: list[int], normalize: bool) -> np.ndarray:
    """Rows of consecutive images of one item -> one row per item (the mean of several)."""
    vectors = l2_normalize(rows) if normalize else rows
    bounds = np.flatnonzero(np.diff(owners)) + 1
    groups = np.split(vectors, bounds)
    out = np.stack([group[0] if len(group) == 1 else group.mean(axis=0) for group in groups]).astype(
        np.float32
    )
    return l2_normalize(out) if normalize else out
