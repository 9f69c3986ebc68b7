"""Donut's page preparation, as `DonutImageProcessor` does it before rescaling: optionally turn a
page whose long axis disagrees with the processor's size by 90 degrees, resize its short side to
the size's short side, shrink it into the size as a thumbnail (aspect kept), and centre it on a
black page of exactly that size. The device rescales and normalizes (as for CLIP).

Sizes follow transformers' arithmetic (truncation included) and every resize is Pillow's uint8
resize with the processor's filter (bicubic for the thumbnail when the filter is NEAREST, 0), so
the pixels equal the processor's before it rescales.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.media.images import resize_pixels
from sie.media_config import BICUBIC, BILINEAR, MediaConfigError, read_preprocessor_config

# DonutImageProcessor's class defaults, for keys its preprocessor config leaves out.
_DEFAULTS: dict[str, Any] = {
    "size": {"height": 2560, "width": 1920},
    "resample": BILINEAR,
    "do_resize": True,
    "do_thumbnail": True,
    "do_align_long_axis": False,
    "do_pad": True,
}


@dataclass(frozen=True, slots=True)
class PageSpec:
    height: int
    width: int
    resample: int
    do_resize: bool
    do_thumbnail: bool
    do_align_long_axis: bool
    do_pad: bool


def page_spec(folder: Path) -> PageSpec:
    raw = read_preprocessor_config(folder)
    conf = {**_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    if conf.get("do_center_crop"):
        raise MediaConfigError(f"{folder}: a centre crop after Donut's padding is not supported")
    height, width = _height_width(conf["size"])
    return PageSpec(
        height=height,
        width=width,
        resample=int(conf["resample"]),
        do_resize=bool(conf["do_resize"]),
        do_thumbnail=bool(conf["do_thumbnail"]),
        do_align_long_axis=bool(conf["do_align_long_axis"]),
        do_pad=bool(conf["do_pad"]),
    )


def _height_width(size: Any) -> tuple[int, int]:
    """Legacy configs give a list [width, height] (the processor reverses it), newer ones a dict."""
    if isinstance(size, dict) and "height" in size and "width" in size:
        return int(size["height"]), int(size["width"])
    if isinstance(size, list | tuple) and len(size) == 2:
        return int(size[1]), int(size[0])
    if isinstance(size, int):
        return size, size
    raise MediaConfigError(f"unsupported Donut page size {size!r}")


def prepare_page(pixels: np.ndarray, spec: PageSpec, max_pixels: int) -> np.ndarray:
    """[H, W, 3] uint8 RGB -> the processor's page before rescaling ([height, width, 3] when padded).
    The resize before the thumbnail may enlarge a thin page: past `max_pixels` it is a 400."""
    if spec.do_align_long_axis and _axes_disagree(pixels.shape[0], pixels.shape[1], spec):
        pixels = np.ascontiguousarray(np.rot90(pixels, 3))  # clockwise, as the processor turns it
    if spec.do_resize:
        height, width = _short_side_hw(pixels.shape[0], pixels.shape[1], min(spec.height, spec.width))
        if height * width > max_pixels:
            raise InvalidInput(
                f"the image's aspect is too extreme: resized for the model it would be {width}x{height} "
                f"pixels, over the limit of {max_pixels}"
            )
        pixels = _resize(pixels, height, width, spec.resample)
    if spec.do_thumbnail:
        height, width = thumbnail_hw(pixels.shape[0], pixels.shape[1], spec.height, spec.width)
        if min(height, width) == 0:  # the processor fails on it too
            raise InvalidInput(
                f"the image's aspect is too extreme for the model's {spec.width}x{spec.height} page"
            )
        if (height, width) != pixels.shape[:2]:
            pixels = _resize(pixels, height, width, spec.resample or BICUBIC)
    return _pad(pixels, spec.height, spec.width) if spec.do_pad else pixels


def _axes_disagree(height: int, width: int, spec: PageSpec) -> bool:
    return (spec.width < spec.height and width > height) or (spec.width > spec.height and width < height)


def _short_side_hw(height: int, width: int, short: int) -> tuple[int, int]:
    """transformers' `get_resize_output_image_size(default_to_square=False)`: the short side to
    `short`, the long one scaled and truncated."""
    if width <= height:
        return int(short * height / width), short
    return short, int(short * width / height)


def thumbnail_hw(height: int, width: int, max_height: int, max_width: int) -> tuple[int, int]:
    """DonutImageProcessor's thumbnail size: within (max_height, max_width), the aspect kept by
    scaling the other side down from the capped one."""
    new_height, new_width = min(height, max_height), min(width, max_width)
    if (new_height, new_width) == (height, width):
        return height, width
    if height > width:
        new_width = int(width * new_height / height)
    elif width > height:
        new_height = int(height * new_width / width)
    return new_height, new_width


def _resize(pixels: np.ndarray, height: int, width: int, filter_: int) -> np.ndarray:
    return resize_pixels(pixels, width, height, filter_)


def _pad(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """Centred on a black page of (height, width); the extra row or column goes below and right."""
    if pixels.shape[0] > height or pixels.shape[1] > width:  # only with do_thumbnail off
        raise InvalidInput(f"the image is larger than the model's {width}x{height} page")
    top, left = (height - pixels.shape[0]) // 2, (width - pixels.shape[1]) // 2
    page = np.zeros((height, width, 3), np.uint8)
    page[top : top + pixels.shape[0], left : left + pixels.shape[1]] = pixels
    return page
