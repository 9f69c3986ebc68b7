"""How ColQwen2.5, ColSmol and the OCR models' pages are sized, read from the model folder (no
torch, no Pillow).

Both sides read it: the frontend resizes (and, for ColSmol, tiles) each page, the device normalizes
the pixels it gets (sie.gpu_proc.adapters.clip.PixelNormalizer) before the vision tower.

- ColQwen2.5 (Qwen2-VL's image processor): each page keeps its aspect, resized by `smart_resize` to
  sides that are multiples of patch x merge (28 px) with an area between SIE's bounds, 256 and 768
  visual tokens (SIE passes them to the processor in place of the folder's), bicubic.
- ColSmol (Idefics3's image processor): the longer side resized to `size.longest_edge`, then both
  sides up to multiples of the tile (`max_image_size.longest_edge`), cut into tiles row by row, and
  a global view: the whole page resized to one tile. Lanczos, as the folder says.
- LightOnOCR (Pixtral's image processor): each page keeps its aspect, scaled down (never up) so no
  side exceeds `size.longest_edge`, then each side rounded up to whole patches, bicubic; a prompt
  token stands for a patch_size x spatial_merge_size square.
- LightOnOCR-3 (Qwen2VLImageProcessor), GLM-OCR (Glm46VImageProcessor) and PaddleOCR-VL
  (PaddleOCRVLImageProcessor): Qwen2-VL's rule with the folder's own bounds (`size.shortest_edge`
  and `size.longest_edge` are pixel counts; GLM's count a still page once per temporal patch); GLM
  and PaddleOCR-VL first scale a side under one token up, each its own way; bicubic.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from sie.media_config import (
    BICUBIC,
    CLIP_MEAN,
    CLIP_STD,
    HALF,
    ImageSpec,
    channel_triple,
    read_preprocessor_config,
)
from sie.model_config import ModelConfigError
from sie.qwen_images import MAX_ASPECT_RATIO, glm_smart_resize, paddle_smart_resize, smart_resize

# SIE's ColQwen2.5 adapter loads its processor with these bounds (in pixels: visual tokens x 28 x 28).
QWEN_MIN_PIXELS = 256 * 28 * 28
QWEN_MAX_PIXELS = 768 * 28 * 28
# The processors' own bounds, for a folder that gives none.
GLM_DEFAULT_SIZE = {"shortest_edge": 112 * 112, "longest_edge": 28 * 28 * 15000}
PADDLE_DEFAULT_SIZE = {"shortest_edge": 384 * 384, "longest_edge": 1536 * 1536}
QWEN_DEFAULT_SIZE = {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280}
IDEFICS3_MAX_SIDE = 4096  # Idefics3's bound on a resized side
LANCZOS = 1
Triple = tuple[float, float, float]


class PageConfigError(ModelConfigError):
    """A processor config this server cannot follow."""


class PageLayout(Protocol):
    """How a page generating OCR model sizes a page (PixtralPages, GridPages)."""

    @property
    def pixels(self) -> ImageSpec: ...  # the rescale and normalization, and the resize filter

    @property
    def largest_area(self) -> int: ...  # pixels of the largest resized page

    @property
    def most_image_tokens(self) -> int: ...  # prompt tokens of the largest resized page

    def resized(self, height: int, width: int) -> tuple[int, int]: ...

    def image_tokens(self, height: int, width: int) -> int: ...


@dataclass(frozen=True, slots=True)
class TiledPages:
    """Idefics3's page tiles: square tiles of `tile` pixels, and one global view."""

    longest_edge: int  # the first resize's longer side
    tile: int
    split: bool  # cut into tiles (else the page is one tile)
    resample: int
    pixels: ImageSpec  # a tile: its size, rescale and normalization

    def first_size(self, height: int, width: int) -> tuple[int, int]:
        """The first resize: the longer side to `longest_edge` (up or down), the other even."""
        aspect = width / height
        if width >= height:
            width = self.longest_edge
            height = int(width / aspect)
            height += height % 2
        else:
            height = self.longest_edge
            width = int(height * aspect)
            width += width % 2
        height, width = max(height, 1), max(width, 1)
        aspect = width / height
        if width >= height and width > IDEFICS3_MAX_SIDE:
            width, height = IDEFICS3_MAX_SIDE, max(int(IDEFICS3_MAX_SIDE / aspect), 1)
        elif height > width and height > IDEFICS3_MAX_SIDE:
            height, width = IDEFICS3_MAX_SIDE, max(int(IDEFICS3_MAX_SIDE * aspect), 1)
        return height, width

    def tiled_size(self, height: int, width: int) -> tuple[int, int]:
        """The second resize: both sides up to multiples of the tile, the aspect roughly kept."""
        tile, aspect = self.tile, width / height
        if width >= height:
            width = math.ceil(width / tile) * tile
            height = math.ceil(int(width / aspect) / tile) * tile
        else:
            height = math.ceil(height / tile) * tile
            width = math.ceil(int(height * aspect) / tile) * tile
        return height, width

    def max_tiles(self) -> int:
        """Tiles of the largest page, its global view included."""
        if not self.split:
            return 1
        side = min(self.longest_edge, IDEFICS3_MAX_SIDE)
        per_side = math.ceil(side / self.tile)
        return per_side * per_side + 1


@dataclass(frozen=True, slots=True)
class PixtralPages:
    """Pixtral's page sizes: no side over `longest_edge`, sides in whole `resize_patch` patches."""

    longest_edge: int
    resize_patch: tuple[int, int]  # (height, width) the sides round up to
    token_edge: int  # pixels per prompt token side: the vision patch times the spatial merge
    pixels: ImageSpec  # the rescale and normalization (its height and width: the largest square page)

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of the page as the processor resizes it; ValueError for a page that
        scales to nothing."""
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

    def image_tokens(self, height: int, width: int) -> int:
        rows, columns = self.token_grid(height, width)
        return rows * columns

    @property
    def largest_area(self) -> int:
        """Pixels of the largest resized page."""
        height, width = self._largest_sides
        return height * width

    @property
    def most_image_tokens(self) -> int:
        return self.image_tokens(*self._largest_sides)

    @property
    def _largest_sides(self) -> tuple[int, int]:
        patch_h, patch_w = self.resize_patch
        return -(-self.longest_edge // patch_h) * patch_h, -(-self.longest_edge // patch_w) * patch_w


@dataclass(frozen=True, slots=True)
class GridPages:
    """Qwen2-VL's page grid: patch_size patches, merged merge_size x merge_size a token, sized by
    Qwen2-VL's `smart_resize` (ColQwen2.5, ColQwen3, LightOnOCR-3) or GLM's or PaddleOCR-VL's variant,
    between pixel bounds."""

    patch_size: int
    merge_size: int
    temporal_patch: int  # the vision tower's: a still page is repeated over it
    min_pixels: int
    max_pixels: int
    pixels: ImageSpec  # the rescale and normalization (its height and width: the largest square page)
    rule: Literal["qwen", "glm", "paddle"]  # Qwen2-VL's smart_resize, or GLM's or PaddleOCR-VL's

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    @property
    def counted_frames(self) -> int:
        """How often the pixel bounds count a still page: GLM's count it per temporal patch."""
        return self.temporal_patch if self.rule == "glm" else 1

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) of the page as the processor resizes it; ValueError for a too-long page."""
        f, least, most = self.factor, self.min_pixels, self.max_pixels
        if self.rule == "paddle":
            return paddle_smart_resize(height, width, f, least, most)
        if self.rule == "glm":
            return glm_smart_resize(height, width, f, least, most, self.temporal_patch)
        return smart_resize(height, width, f, least, most)

    def image_tokens(self, height: int, width: int) -> int:
        return (height // self.patch_size) * (width // self.patch_size) // self.merge_size**2

    @property
    def largest_area(self) -> int:
        """A bound on a resized page's pixels: the budget; a 200:1 page held at one token across;
        a small page scaled up to the least budget, each side then rounded up."""
        f, aspect, frames = self.factor, MAX_ASPECT_RATIO, self.counted_frames
        budget, least = self.max_pixels // frames, self.min_pixels // frames
        narrow = f * (math.isqrt(aspect * budget) + f)
        small = least + f * 2 * math.isqrt(aspect * least + 1) + f * f
        return max(budget, narrow, small)

    @property
    def most_image_tokens(self) -> int:
        return self.largest_area // self.factor**2


def image_processor_config(folder: Path) -> dict[str, Any]:
    """preprocessor_config.json, else the image processor saved inside processor_config.json."""
    raw = read_preprocessor_config(folder)
    if raw:
        return raw
    path = folder / "processor_config.json"
    processor = json.loads(path.read_text()) if path.is_file() else {}
    nested = processor.get("image_processor") if isinstance(processor, dict) else None
    return nested if isinstance(nested, dict) else {}


def patch_pages(folder: Path) -> GridPages:
    """ColQwen2.5's pages: the folder's patch grid and normalization, SIE's pixel bounds."""
    raw = image_processor_config(folder)
    if not raw.get("do_resize", True):
        raise PageConfigError(f"{folder}: Qwen2-VL pages need do_resize (sides fitting the patch grid)")
    patch_size, merge_size = int(raw.get("patch_size", 14)), int(raw.get("merge_size", 2))
    side = math.isqrt(QWEN_MAX_PIXELS) // (patch_size * merge_size) * (patch_size * merge_size)
    resample = int(raw.get("resample", BICUBIC))
    return GridPages(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch=int(raw.get("temporal_patch_size", 2)),
        min_pixels=QWEN_MIN_PIXELS,
        max_pixels=QWEN_MAX_PIXELS,
        pixels=_normalization(raw, side, resample, (CLIP_MEAN, CLIP_STD)),
        rule="qwen",
    )


def tiled_pages(folder: Path) -> TiledPages:
    raw = image_processor_config(folder)
    if not raw.get("do_resize", True):
        raise PageConfigError(f"{folder}: Idefics3 pages need do_resize (unbounded pages, unbounded tiles)")
    tile = _longest_edge(raw.get("max_image_size"), 364)
    size = _longest_edge(raw.get("size"), 4 * 364)
    resample = int(raw.get("resample", LANCZOS))
    return TiledPages(
        longest_edge=size,
        tile=tile,
        split=bool(raw.get("do_image_splitting", True)),
        resample=resample,
        pixels=_normalization(raw, tile, resample, (HALF, HALF)),
    )


def pixtral_pages(folder: Path) -> PixtralPages:
    """The folder's image processor settings, and the vision patch and spatial merge of its
    config.json (LightOnOCR's layout: `vision_config.patch_size`, `spatial_merge_size`)."""
    raw = image_processor_config(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    vision = config.get("vision_config") or {}
    size = raw.get("size") or {}
    longest = size.get("longest_edge") or size.get("height")
    if not isinstance(longest, int) or longest <= 0:
        raise PageConfigError(
            f"{folder}: no size.longest_edge in its image processor settings "
            "(preprocessor_config.json or processor_config.json)"
        )
    patch = raw.get("patch_size", vision.get("patch_size", 14))
    resample = int(raw.get("resample", BICUBIC))
    return PixtralPages(
        longest_edge=longest,
        resize_patch=(patch["height"], patch["width"])
        if isinstance(patch, dict)
        else (int(patch), int(patch)),
        token_edge=int(vision.get("patch_size", 14)) * int(config.get("spatial_merge_size", 2)),
        pixels=_normalization(raw, longest, resample, (CLIP_MEAN, CLIP_STD)),
    )


def glm_pages(folder: Path) -> GridPages:
    return _grid_pages(folder, "glm", GLM_DEFAULT_SIZE, default_temporal_patch=2)


def paddle_pages(folder: Path) -> GridPages:
    return _grid_pages(folder, "paddle", PADDLE_DEFAULT_SIZE, default_temporal_patch=1)


def qwen_pages(folder: Path) -> GridPages:
    return _grid_pages(folder, "qwen", QWEN_DEFAULT_SIZE, default_temporal_patch=2)


def _grid_pages(
    folder: Path,
    rule: Literal["qwen", "glm", "paddle"],
    default_size: dict[str, int],
    *,
    default_temporal_patch: int,
) -> GridPages:
    raw = image_processor_config(folder)
    if not raw.get("do_resize", True):
        raise PageConfigError(f"{folder}: these pages need do_resize (sides fitting the patch grid)")
    size = dict(raw.get("size") or default_size)
    # Older configs give the bounds as min_pixels / max_pixels, which the processors still honour.
    for key, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        if raw.get(key) is not None:
            size[edge] = raw[key]
    min_pixels, max_pixels = size.get("shortest_edge"), size.get("longest_edge")
    if not all(isinstance(v, int) and v > 0 for v in (min_pixels, max_pixels)) or min_pixels > max_pixels:
        raise PageConfigError(
            f"{folder}: size.shortest_edge and size.longest_edge must be pixel counts, least first "
            f"(got {size!r})"
        )
    patch_size, merge_size = int(raw.get("patch_size", 14)), int(raw.get("merge_size", 2))
    temporal_patch = int(raw.get("temporal_patch_size", default_temporal_patch))
    factor = patch_size * merge_size
    counted = temporal_patch if rule == "glm" else 1
    side = max(factor, math.isqrt(max_pixels // counted) // factor * factor)
    return GridPages(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch=temporal_patch,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        pixels=_normalization(raw, side, int(raw.get("resample", BICUBIC)), (CLIP_MEAN, CLIP_STD)),
        rule=rule,
    )


def _longest_edge(value: Any, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, dict) and isinstance(value.get("longest_edge"), int):
        return int(value["longest_edge"])
    raise PageConfigError(f"expected {{'longest_edge': N}}, got {value!r}")


def _normalization(
    raw: dict[str, Any], side: int, resample: int, defaults: tuple[Triple, Triple]
) -> ImageSpec:
    """The device's part of the processor (rescale, normalize) as an ImageSpec of a side x side page."""
    return ImageSpec(
        kind="square",
        height=side,
        width=side,
        shortest_edge=None,
        resample=resample,
        do_resize=True,
        do_center_crop=False,
        rescale_factor=float(raw.get("rescale_factor", 1 / 255)) if raw.get("do_rescale", True) else 1.0,
        do_normalize=bool(raw.get("do_normalize", True)),
        mean=channel_triple(raw.get("image_mean", defaults[0])),
        std=channel_triple(raw.get("image_std", defaults[1])),
    )
