"""Image bytes -> RGB pixels resized and cropped exactly as the model's image processor does.

Decoding is bounded before it allocates: Pillow reads only the header in `Image.open`, so the
pixel count is checked (decompression bombs) before any pixel is decoded. After decoding: EXIF
orientation, then RGB with transparency composited onto white (as `transformers` converts), then
the processor's own resize and crop, so the device gets the very pixels `transformers` would
normalize. CLIP and SigLIP resize in uint8 through Pillow, which is exact; OWLv2 pads and resizes
in float (a Gaussian filter and a linear zoom), so its pixels travel as float32.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from math import ceil

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from sie.errors import InvalidInput
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
    image: Image.Image  # RGB, upright
    width: int  # of the original (upright) image, for boxes in its pixels
    height: int


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
        image.load()  # the first frame of a GIF or a multi-page TIFF
        image = _upright(image)
    except (OSError, ValueError, SyntaxError, EOFError):
        raise InvalidInput(f"{where}: the image data is truncated or corrupt") from None
    rgb = to_rgb(image)
    return Decoded(rgb, rgb.width, rgb.height)


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


def preprocess(image: Image.Image, spec: ImageSpec) -> np.ndarray:
    """[H, W, 3] pixels for the device: uint8, or float32 in 0..1 for OWLv2."""
    if spec.kind == "owlv2":
        return _owlv2(image, spec)
    if spec.do_resize:
        image = _resize(image, spec)
    pixels = np.asarray(image, np.uint8)
    if spec.do_center_crop:
        pixels = center_crop(pixels, spec.height, spec.width)
    return pixels


def _resize(image: Image.Image, spec: ImageSpec) -> Image.Image:
    """The processor's resize, less the columns its centre crop will drop where that is exact.

    Pillow resizes in two passes, rows first into a uint8 image, then each column on its own. Run
    apart, with the columns the crop drops cut between them, the kept columns come out bit for bit
    as a whole resize gives them (tested against the image processor), and the column pass does
    less work: a 640x480 photo 5.45 -> 4.98 ms here. Rows cannot be cut that way: the row pass
    comes first, and cutting its input would move the filter's positions.
    """
    width, height = _resized_wh(image, spec)
    dropped = width - spec.width
    if not spec.do_center_crop or dropped <= 0 or height == image.height:
        return image.resize((width, height), resample=spec.resample)
    left = dropped // 2  # where transformers' centre crop starts
    rows = image.resize((width, image.height), resample=spec.resample)
    kept = rows.crop((left, 0, left + spec.width, image.height))
    return kept.resize((spec.width, height), resample=spec.resample)


def _resized_wh(image: Image.Image, spec: ImageSpec) -> tuple[int, int]:
    """(width, height) after the resize; the short-side rule is transformers'
    `get_resize_output_image_size(default_to_square=False)`, truncation included."""
    if spec.shortest_edge is None:
        return spec.width, spec.height
    width, height = image.size
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


def _owlv2(image: Image.Image, spec: ImageSpec) -> np.ndarray:
    """Owlv2ImageProcessor: rescale, pad bottom/right to a square with 0, then scikit-image's
    anti-aliased resize (Gaussian filter, linear zoom, clip to the input's range)."""
    from scipy import ndimage  # only OWLv2 needs it; deferred so other frontends never load it

    pixels = (np.asarray(image, np.uint8).astype(np.float64) * spec.rescale_factor).astype(np.float32)
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
