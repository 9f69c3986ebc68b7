"""Image decoding and preprocessing against transformers' image processors on the same bytes.

The frontend sends the device resized pixels and the device normalizes them; here both halves
are composed in numpy and compared with the processor's own tensor (atol 1e-5), per family.
"""

from __future__ import annotations

import io
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from sie.errors import InvalidInput
from sie.frontend.media.images import decode_image, preprocess
from sie.media_config import ImageSpec, image_spec
from tests import media_samples as samples

LIMIT = 50_000_000
SIZES = [(640, 480), (480, 640), (97, 33), (64, 64), (20, 10), (1, 300), (1000, 290), (333, 250)]


def processors() -> dict[str, tuple[Any, str]]:
    import transformers

    return {
        "clip-224": (transformers.CLIPImageProcessorPil(), "clip"),
        "clip-64": (
            transformers.CLIPImageProcessorPil(
                size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64}
            ),
            "clip",
        ),
        "clip-crop-larger": (
            transformers.CLIPImageProcessorPil(
                size={"shortest_edge": 40}, crop_size={"height": 48, "width": 56}
            ),
            "clip",
        ),
        "siglip-64": (transformers.SiglipImageProcessorPil(size={"height": 64, "width": 64}), "clip"),
        "siglip-224": (transformers.SiglipImageProcessorPil(), "clip"),
        "owlv2-96": (transformers.Owlv2ImageProcessorPil(size={"height": 96, "width": 96}), "owlv2"),
    }


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, ImageSpec]]:
    """Each processor saved as a model folder would hold it, and the spec read back from there."""
    out = {}
    for name, (processor, family) in processors().items():
        folder: Path = tmp_path_factory.mktemp(name)
        processor.save_pretrained(folder)
        out[name] = (processor, image_spec(folder, family))
    return out


def device_normalize(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """What the device does with received pixels."""
    import torch

    from sie.gpu_proc.adapters.clip import PixelNormalizer

    normalize = PixelNormalizer(spec, torch.device("cpu"))
    return normalize(torch.from_numpy(pixels.copy())[None], torch.float32)[0].numpy()


def ours(data: bytes, spec: ImageSpec) -> np.ndarray:
    return device_normalize(preprocess(decode_image(data, None, LIMIT, "Item 0 image 0").pixels, spec), spec)


def reference(processor: Any, data: bytes) -> np.ndarray:
    from PIL import ImageOps

    image = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
    return processor(image, return_tensors="np").pixel_values[0]


@pytest.mark.parametrize("name", list(processors()))
@pytest.mark.parametrize(("width", "height"), SIZES)
def test_pixels_equal_the_image_processor(specs: dict[str, Any], name: str, width: int, height: int) -> None:
    processor, spec = specs[name]
    data = samples.jpeg(width, height, seed=width)
    want = reference(processor, data)
    got = ours(data, spec)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["clip-64", "siglip-64", "owlv2-96"])
@pytest.mark.parametrize(
    "data",
    [samples.png_rgba(50, 70), samples.gif(40, 30), samples.webp(33, 65), samples.rotated_jpeg(80, 50)],
    ids=["png-alpha", "gif", "webp", "exif-rotated"],
)
def test_formats_transparency_and_orientation(specs: dict[str, Any], name: str, data: bytes) -> None:
    processor, spec = specs[name]
    np.testing.assert_allclose(ours(data, spec), reference(processor, data), atol=1e-5, rtol=0)


def test_specs_read_the_processor_config(specs: dict[str, Any]) -> None:
    clip = specs["clip-224"][1]
    assert (clip.kind, clip.height, clip.width, clip.shortest_edge, clip.resample) == (
        "crop",
        224,
        224,
        224,
        3,
    )
    siglip = specs["siglip-64"][1]
    assert (siglip.kind, siglip.height, siglip.mean) == ("square", 64, (0.5, 0.5, 0.5))
    owlv2 = specs["owlv2-96"][1]
    assert owlv2.float_pixels and owlv2.device_scale == 1.0 and (owlv2.height, owlv2.width) == (96, 96)


def test_exif_orientation_is_applied() -> None:
    decoded = decode_image(samples.rotated_jpeg(80, 50, orientation=6), None, LIMIT, "x")
    assert (decoded.width, decoded.height) == (50, 80)


def test_gif_gives_its_first_frame_in_rgb() -> None:
    decoded = decode_image(samples.gif(40, 30, frames=3), "gif", LIMIT, "x")
    first = Image.open(io.BytesIO(samples.gif(40, 30, frames=3))).convert("RGB")
    np.testing.assert_array_equal(decoded.pixels, np.asarray(first))


def test_pixel_limit_is_checked_from_the_header_before_decoding() -> None:
    data = samples.jpeg(200, 100)
    decode_image(data, None, 200 * 100, "x")
    with pytest.raises(
        InvalidInput, match=r"Item 2 image 1: image of 200x100 pixels is over the limit of 19999"
    ):
        decode_image(data, None, 200 * 100 - 1, "Item 2 image 1")


@pytest.mark.parametrize("side", [8000, 30000])
def test_a_huge_declared_size_is_refused_without_decoding(side: int) -> None:
    # A 1-pixel PNG whose header claims side x side: decoding 30000 x 30000 would need 2.7 GB.
    png = bytearray(samples.encode(Image.new("RGB", (1, 1)), "PNG"))
    png[16:24] = side.to_bytes(4, "big") * 2
    png[29:33] = zlib.crc32(bytes(png[12:29])).to_bytes(4, "big")  # the IHDR chunk's CRC
    with pytest.raises(InvalidInput, match="over the limit of 50000000 pixels"):
        decode_image(bytes(png), "png", LIMIT, "x")


@pytest.mark.parametrize(
    ("data", "declared", "message"),
    [
        (b"not an image at all", None, "not a decodable image"),
        (samples.jpeg(256, 256)[:4000], None, "truncated or corrupt"),
        (samples.jpeg(8, 8), "heic", "unsupported image format 'heic'"),
        (samples.encode(Image.new("RGB", (8, 8)), "PPM"), None, "unsupported image format 'PPM'"),
    ],
    ids=["garbage", "truncated", "declared-heic", "ppm"],
)
def test_bad_images_are_invalid_input(data: bytes, declared: str | None, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        decode_image(data, declared, LIMIT, "Item 0 image 0")
