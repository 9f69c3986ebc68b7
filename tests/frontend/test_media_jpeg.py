"""The libjpeg-turbo JPEG path against Pillow's own decode of the same bytes: equal bit for bit,
and every file it does not take (or cannot read cleanly) left to Pillow."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageOps

from sie.errors import InvalidInput
from sie.frontend.media import jpeg
from sie.frontend.media.images import decode_image
from tests import media_samples as samples

pytestmark = pytest.mark.skipif(jpeg.simplejpeg is None, reason="simplejpeg has no wheel here")

LIMIT = 50_000_000


def pillow_rgb(data: bytes) -> np.ndarray:
    """What Pillow alone gives: decoded, turned upright, in RGB."""
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def fast(data: bytes) -> np.ndarray | None:
    return jpeg.decode_rgb(Image.open(io.BytesIO(data)), data)


def variants() -> dict[str, bytes]:
    photo = Image.fromarray(samples.pattern(203, 151, seed=3))
    return {
        "4:2:0": samples.encode(photo, "JPEG", quality=90, subsampling="4:2:0"),
        "4:2:2": samples.encode(photo, "JPEG", quality=90, subsampling="4:2:2"),
        "4:4:4": samples.encode(photo, "JPEG", quality=95, subsampling="4:4:4"),
        "progressive": samples.encode(photo, "JPEG", quality=85, progressive=True),
        "optimized": samples.encode(photo, "JPEG", quality=75, optimize=True),
        "restart-markers": samples.encode(photo, "JPEG", quality=90, restart_marker_blocks=4),
        "rgb-coded": samples.encode(photo, "JPEG", quality=90, keep_rgb=True),
        "grayscale": samples.encode(photo.convert("L"), "JPEG", quality=90),
        "1x1": samples.encode(Image.new("RGB", (1, 1), (200, 30, 90)), "JPEG"),
        "7x301": samples.encode(Image.fromarray(samples.pattern(7, 301)), "JPEG", quality=70),
        "photo-640x480": samples.jpeg(640, 480, seed=11),
    }


@pytest.mark.parametrize("name", list(variants()))
def test_pixels_equal_pillows(name: str) -> None:
    data = variants()[name]
    got = fast(data)
    assert got is not None, "a plain JPEG takes the fast path"
    np.testing.assert_array_equal(got, pillow_rgb(data))
    np.testing.assert_array_equal(decode_image(data, "jpeg", LIMIT, "x").pixels, got)


@pytest.mark.parametrize("orientation", range(2, 9))
def test_a_rotated_jpeg_is_left_to_pillow_and_turned(orientation: int) -> None:
    data = samples.rotated_jpeg(40, 24, orientation=orientation)
    assert fast(data) is None
    np.testing.assert_array_equal(decode_image(data, "jpeg", LIMIT, "x").pixels, pillow_rgb(data))


def test_cmyk_is_left_to_pillow() -> None:
    data = samples.encode(Image.fromarray(samples.pattern(30, 20)).convert("CMYK"), "JPEG")
    assert fast(data) is None
    np.testing.assert_array_equal(decode_image(data, "jpeg", LIMIT, "x").pixels, pillow_rgb(data))


def test_other_formats_are_not_taken() -> None:
    assert fast(samples.webp(20, 20)) is None


def test_a_damaged_jpeg_keeps_pillows_error() -> None:
    data = samples.jpeg(256, 256)[:4000]
    assert fast(data) is None
    with pytest.raises(InvalidInput, match="Item 0 image 0: the image data is truncated or corrupt"):
        decode_image(data, None, LIMIT, "Item 0 image 0")
