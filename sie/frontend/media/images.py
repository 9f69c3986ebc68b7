"""Image bytes -> RGB pixels resized and cropped exactly as the model's image processor does.

Decoding is bounded before it allocates: Pillow reads only the header in `Image.open`, so the
pixel count is checked (decompression bombs) before any pixel is decoded. Plain JPEGs are decoded
by libjpeg-turbo's own API (`jpeg.py`: Pillow's pixels, faster), the rest by Pillow. After
decoding: EXIF orientation, then RGB with transparency composited onto white (as `transformers`
converts), then the processor's own resize and crop, so the device gets the very pixels
`transformers` would normalize. CLIP and SigLIP resize in uint8 with Pillow's arithmetic
(`resample.py`, or Pillow itself where that cannot run), which is exact; OWLv2 pads and resizes in
float (a Gaussian filter and a linear zoom), so its pixels travel as float32.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from math import ceil

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from sie.errors import InvalidInput
from sie.frontend.media import resample
from sie.frontend.media.jpeg import decode_rgb
from sie.media_config import ImageSpec

# Pillow's format names -> what a request's `format` may say for them.
FORMATS = {
    "JPEG": {"jpeg", "jpg", "jpe"},
    "PNG": {"png"},
    "WEBP": {"webp"},
    "GIF": {"gif"},
    "BMP": {"bmp"},
    "TIFF": {"tiff", "tif"},
}
_DECLARED = set().union(*FORMATS.values())
_ORIENTATION = 0x0112


@dataclass(frozen=True, slots=True)
class Decoded:
    pixels: np.ndarray  # [height, width, 3] uint8 RGB, upright
    width: int  # of the original (upright) image, for boxes in its pixels
    height: int


def resized_size(data: bytes, resize: Callable[[int, int], tuple[int, int]]) -> tuple[int, int] | None:
    """(height, width) of an image once `resize`d, its size read from its header alone; None when
    the header cannot be read or `resize` refuses it (the decode then reports why)."""
    try:
        width, height = Image.open(io.BytesIO(data)).size
        return resize(height, width)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None


def decode_image(data: bytes, declared: str | None, max_pixels: int, where: str) -> Decoded:
    """Decode one image; every failure is an InvalidInput naming `where` ("Item 0 image 1")."""
    if declared is not None and declared.lower() not in _DECLARED:
        raise InvalidInput(f"{where}: unsupported image format '{declared}' ({_supported()})")
    try:
        image = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError:  # Pillow's own, far higher, limit: also read from the header
        raise InvalidInput(f"{where}: image is over the limit of {max_pixels} pixels") from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise InvalidInput(f"{where}: the bytes are not a decodable image ({_supported()})") from None
    if image.format not in FORMATS:
        raise InvalidInput(f"{where}: unsupported image format '{image.format}' ({_supported()})")
    width, height = image.size
    if width * height > max_pixels:
        raise InvalidInput(
            f"{where}: image of {width}x{height} pixels is over the limit of {max_pixels} pixels"
        )
    try:
        pixels = decode_rgb(image, data)
        if pixels is None:
            image.load()  # the first frame of a GIF or a multi-page TIFF
            pixels = np.asarray(to_rgb(_upright(image)), np.uint8)
    except (OSError, ValueError, SyntaxError, EOFError):
        raise InvalidInput(f"{where}: the image data is truncated or corrupt") from None
    return Decoded(pixels, pixels.shape[1], pixels.shape[0])


def _supported() -> str:
    return "supported: JPEG, PNG, WebP, GIF, BMP, TIFF"


def _upright(image: Image.Image) -> Image.Image:
    # exif_transpose copies the image; most images carry no rotation, so look first.
    if image.getexif().get(_ORIENTATION, 1) in (None, 1):
        return image
    return ImageOps.exif_transpose(image)


def to_rgb(image: Image.Image) -> Image.Image:
    """transformers' `convert_to_rgb`: transparency is composited onto white."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image if image.mode == "RGB" else image.convert("RGB")


def preprocess(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """[H, W, 3] pixels for the device: uint8, or float32 in 0..1 for OWLv2."""
    if spec.kind == "owlv2":
        return _owlv2(pixels, spec)
    if spec.do_resize:
        pixels = _resize(pixels, spec)
    if spec.do_center_crop:
        pixels = center_crop(pixels, spec.height, spec.width)
    return pixels


def _resize(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """The processor's resize, less the columns its centre crop will drop (a resize's columns do
    not depend on each other's, so the kept ones come out as a whole resize gives them)."""
    width, height = _resized_wh(pixels, spec)
    dropped = width - spec.width
    left, kept = (dropped // 2, spec.width) if spec.do_center_crop and dropped > 0 else (0, width)
    return resize_pixels(pixels, width, height, spec.resample, left, kept)


def resize_pixels(
    pixels: np.ndarray, width: int, height: int, resample_filter: int, left: int = 0, kept: int | None = None
) -> np.ndarray:
    """Pillow's resize of uint8 [H, W, 3] to (width, height), columns left .. left + kept of it."""
    kept = width if kept is None else kept
    fast = resample.resize(pixels, width, height, resample_filter, left, kept)
    if fast is not None:
        return fast
    resized = Image.fromarray(pixels).resize((width, height), resample=resample_filter)
    return np.asarray(resized, np.uint8)[:, left : left + kept]


def _resized_wh(pixels: np.ndarray, spec: ImageSpec) -> tuple[int, int]:
    """(width, height) after the resize; the short-side rule is transformers'
    `get_resize_output_image_size(default_to_square=False)`, truncation included."""
    if spec.shortest_edge is None:
        return spec.width, spec.height
    height, width = pixels.shape[:2]
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = spec.shortest_edge, int(spec.shortest_edge * long / short)
    return (new_short, new_long) if width <= height else (new_long, new_short)


def center_crop(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """transformers' `center_crop` on [H, W, C]: zero-padded when the image is smaller."""
    orig_h, orig_w = pixels.shape[:2]
    top, left = (orig_h - height) // 2, (orig_w - width) // 2
    if top >= 0 and left >= 0:
        return pixels[top : top + height, left : left + width]
    new_h, new_w = max(height, orig_h), max(width, orig_w)
    padded = np.zeros((new_h, new_w, pixels.shape[2]), pixels.dtype)
    top_pad, left_pad = ceil((new_h - orig_h) / 2), ceil((new_w - orig_w) / 2)
    padded[top_pad : top_pad + orig_h, left_pad : left_pad + orig_w] = pixels
    top, left = top + top_pad, left + left_pad
    return padded[max(0, top) : min(new_h, top + height), max(0, left) : min(new_w, left + width)]


def _owlv2(received: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """Owlv2ImageProcessor: rescale, pad bottom/right to a square with 0, then scikit-image's
    anti-aliased resize (Gaussian filter, linear zoom, clip to the input's range)."""
    from scipy import ndimage  # only OWLv2 needs it; deferred so other frontends never load it

    pixels = (received.astype(np.float64) * spec.rescale_factor).astype(np.float32)
    height, width = pixels.shape[:2]
    size = max(height, width)
    pixels = np.pad(pixels, ((0, size - height), (0, size - width), (0, 0)))
    if not spec.do_resize:
        return pixels
    out_shape = (spec.height, spec.width, 3)
    factors = np.divide(pixels.shape, out_shape)
    sigma = np.maximum(0, (factors - 1) / 2)
    filtered = ndimage.gaussian_filter(pixels, sigma, cval=0, mode="mirror")
    zoomed = ndimage.zoom(filtered, [1 / f for f in factors], order=1, mode="mirror", cval=0, grid_mode=True)
    return np.clip(zoomed, pixels.min(), pixels.max()).astype(np.float32)
