"""Qwen2-VL's image sizing, which Qwen3-VL, ColQwen2.5, GLM-OCR and PaddleOCR-VL share: each image keeps its
aspect, its sides rounded to whole merged tokens, its area held between a minimum and a maximum
pixel count."""

from __future__ import annotations

import math

MAX_ASPECT_RATIO = 200  # Qwen2-VL's smart_resize refuses longer images


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int, *, frames: int = 1
) -> tuple[int, int]:
    """(height, width) as Qwen2VLImageProcessor resizes; ValueError past the aspect ratio limit.
    `frames`: how many times the budget counts a still image (GLM's processors repeat it over the
    tower's temporal patch)."""
    if max(height, width) > MAX_ASPECT_RATIO * min(height, width):
        raise ValueError(
            f"an image of {width}x{height} pixels is longer than the model's aspect ratio limit "
            f"of {MAX_ASPECT_RATIO}:1"
        )
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if frames * h_bar * w_bar > max_pixels:
        beta = math.sqrt(frames * height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif frames * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def glm_smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int, frames: int
) -> tuple[int, int]:
    """(height, width) as Glm46VImageProcessor resizes a still image: a side under `factor` scaled
    up first (truncated, as it truncates), then Qwen's rule with the budget counted per frame."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    return smart_resize(height, width, factor, min_pixels, max_pixels, frames=frames)


def paddle_smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """(height, width) as PaddleOCRVLImageProcessor resizes: a short side under `factor` raised to it,
    the other scaled with it (rounded; height first, then width), then Qwen's rule."""
    if height < factor:
        height, width = factor, round(width * factor / height)
    if width < factor:
        height, width = round(height * factor / width), factor
    return smart_resize(height, width, factor, min_pixels, max_pixels)
