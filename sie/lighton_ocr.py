"""LightOnOCR's page recipe, read by both sides: how a page image is sized and how many prompt tokens
it takes. No torch, no Pillow.

LightOnOCR (Pixtral's vision tower, a Qwen3 decoder) reads a page at its own aspect: scaled down,
never up, so neither side exceeds the processor's `longest_edge`, then each side rounded up to a
whole number of the processor's patches (Pixtral's rule), bicubic. The vision tower cuts it into
`patch_size` patches that the projector merges `spatial_merge_size` x `spatial_merge_size`, so the
page is `(H // t) * (W // t)` prompt tokens with `t = patch_size * spatial_merge_size`, each one
copy of the image token, as LightOnOcrProcessor expands it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sie.media_config import channel_triple, read_preprocessor_config

BICUBIC = 3
DEFAULT_SYSTEM_PROMPT = "You are an OCR engine. Return the markdown representation of the document."
DEFAULT_MAX_NEW_TOKENS = 4096
HEADER = 1  # ids before an item's prompt on the ring: its max new tokens


@dataclass(frozen=True, slots=True)
class PageSpec:
    longest_edge: int  # the processor's size.longest_edge: no side larger
    resize_patch: tuple[int, int]  # the processor's patch_size (height, width): sides round up to it
    token_edge: int  # pixels per prompt token side: the vision patch times the spatial merge
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rescale_factor: float
    image_token_id: int

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """The processor's output size for a page of `height` x `width` pixels."""
        ratio = max(height / self.longest_edge, width / self.longest_edge)
        if ratio > 1:
            height, width = math.floor(height / ratio), math.floor(width / ratio)
        if height < 1 or width < 1:
            limit = self.longest_edge
            raise ValueError(f"the page scales to {width}x{height} pixels to fit {limit}: nothing to read")
        patch_h, patch_w = self.resize_patch
        return -(-height // patch_h) * patch_h, -(-width // patch_w) * patch_w

    def token_grid(self, height: int, width: int) -> tuple[int, int]:
        """(rows, columns) of prompt tokens a resized page takes."""
        return height // self.token_edge, width // self.token_edge


def page_spec(folder: Path) -> PageSpec:
    """The folder's processor settings (preprocessor_config.json, else processor_config.json's
    `image_processor`) and the model's patch geometry (config.json)."""
    processor = _processor_settings(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    vision = config.get("vision_config") or {}
    token_edge = int(vision.get("patch_size", 14)) * int(config.get("spatial_merge_size", 2))
    size = processor.get("size") or {}
    longest = size.get("longest_edge") or size.get("height")
    if not isinstance(longest, int) or longest <= 0:
        raise ValueError(f"{folder}: the image processor gives no size.longest_edge")
    patch = processor.get("patch_size", vision.get("patch_size", 14))
    resize_patch = (patch["height"], patch["width"]) if isinstance(patch, dict) else (int(patch), int(patch))
    image_token_id = config.get("image_token_id")
    if not isinstance(image_token_id, int):
        raise ValueError(f"{folder}/config.json names no image_token_id")
    return PageSpec(
        longest_edge=longest,
        resize_patch=resize_patch,
        token_edge=token_edge,
        mean=channel_triple(processor.get("image_mean", (0.48145466, 0.4578275, 0.40821073))),
        std=channel_triple(processor.get("image_std", (0.26862954, 0.26130258, 0.27577711))),
        rescale_factor=float(processor.get("rescale_factor", 1 / 255)),
        image_token_id=image_token_id,
    )


def _processor_settings(folder: Path) -> dict[str, Any]:
    if (folder / "preprocessor_config.json").is_file():
        return read_preprocessor_config(folder)
    path = folder / "processor_config.json"
    if path.is_file():
        found = json.loads(path.read_text(encoding="utf-8")).get("image_processor")
        if isinstance(found, dict):
            return found
    raise ValueError(f"{folder} has no preprocessor_config.json or processor_config.json")
