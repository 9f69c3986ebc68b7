"""DETR-style resizing (Grounding DINO): the short side to `shortest_edge`, unless the long side
would pass `longest_edge`, aspect kept, no crop. So images keep sizes of their own.

The size rule is transformers' `get_size_with_aspect_ratio` (rounding and truncation included);
the pixels are Pillow's uint8 resize with the processor's filter, as its PIL backend resizes
before it rescales and normalizes (which the device does).
"""

from __future__ import annotations

import numpy as np

from sie.frontend.media.images import resize_pixels
from sie.media_config import ImageSpec


def resized_hw(height: int, width: int, shortest: int, longest: int | None) -> tuple[int, int]:
    """(height, width) the processor resizes an image of (height, width) to."""
    short, long = float(min(height, width)), float(max(height, width))
    size, raw = shortest, None
    if longest is not None and long / short * shortest > longest:
        raw = longest * short / long  # the long side would overflow: fit it instead
        size = round(raw)
    if (height <= width and height == size) or (width <= height and width == size):
        return height, width
    scale = raw if raw is not None else size
    if width < height:
        return int(scale * height / width), size
    return size, int(scale * width / height)


def resize_detr(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """[H, W, 3] uint8 -> [h, w, 3] uint8 at the processor's size for this image."""
    if not spec.do_resize or spec.shortest_edge is None:
        return pixels
    height, width = resized_hw(pixels.shape[0], pixels.shape[1], spec.shortest_edge, spec.longest_edge)
    if (height, width) == pixels.shape[:2]:
        return pixels
    return resize_pixels(pixels, width, height, spec.resample)
