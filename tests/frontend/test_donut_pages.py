"""Donut's page preparation against DonutImageProcessorPil (transformers' processor without
torchvision): the same uint8 page before rescaling, for every resize, thumbnail, rotation and
padding setting; and the device's normalization on it gives the processor's pixel_values."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from sie.errors import InvalidInput
from sie.frontend.media.donut import page_spec, prepare_page, thumbnail_hw
from sie.frontend.media.images import decode_image
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.donut import pixel_spec
from sie.media_config import MediaConfigError
from tests import media_samples as samples

IMAGES = [
    samples.jpeg(120, 90),
    samples.jpeg(50, 150, seed=2),
    samples.jpeg(30, 30, seed=3),
    samples.jpeg(200, 60, seed=5),
    samples.jpeg(33, 17, seed=6),
    samples.jpeg(400, 520, seed=7),
]
CONFIGS: list[dict[str, Any]] = [
    {"size": {"height": 40, "width": 32}},
    {"size": [32, 40], "do_align_long_axis": True},  # legacy [width, height]
    {"size": {"height": 40, "width": 64}, "resample": 0},  # NEAREST: the thumbnail goes bicubic
    {"size": {"height": 48, "width": 48}, "do_resize": False, "resample": 3},
    {"size": {"height": 64, "width": 40}, "do_align_long_axis": True, "image_mean": [0.4, 0.5, 0.6]},
]


def processor_folder(tmp_path: Path, config: dict[str, Any]) -> Path:
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"image_processor_type": "DonutImageProcessor", **config})
    )
    return tmp_path


def reference_processor(folder: Path) -> Any:
    import transformers

    return transformers.DonutImageProcessorPil.from_pretrained(folder)


@pytest.mark.parametrize("config", CONFIGS)
def test_pages_are_the_processors_before_rescaling(tmp_path: Path, config: dict[str, Any]) -> None:
    folder = processor_folder(tmp_path, config)
    spec, processor = page_spec(folder), reference_processor(folder)
    for data in IMAGES:
        page = prepare_page(decode_image(data, None, 10**8, "Item 0 image 0").pixels, spec, 10**8)
        picture = Image.open(io.BytesIO(data)).convert("RGB")
        want = processor(picture, do_rescale=False, do_normalize=False, return_tensors="np").pixel_values[0]
        assert page.shape == (spec.height, spec.width, 3)
        np.testing.assert_array_equal(page, want.transpose(1, 2, 0).astype(np.uint8))
        np.testing.assert_array_equal(want, want.round())  # uint8 values all the way


@pytest.mark.parametrize("config", CONFIGS)
def test_the_device_normalization_gives_the_pixel_values(tmp_path: Path, config: dict[str, Any]) -> None:
    folder = processor_folder(tmp_path, config)
    processor = reference_processor(folder)
    normalizer = PixelNormalizer(pixel_spec(processor), torch.device("cpu"))
    pages = [
        prepare_page(decode_image(d, None, 10**8, "x").pixels, page_spec(folder), 10**8) for d in IMAGES[:3]
    ]
    got = normalizer(torch.from_numpy(np.stack(pages)), torch.float32).numpy()
    pictures = [Image.open(io.BytesIO(d)).convert("RGB") for d in IMAGES[:3]]
    want = processor(pictures, return_tensors="np").pixel_values
    np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)


def test_thumbnail_sizes_are_transformers() -> None:
    import transformers
    from transformers.image_utils import SizeDict

    processor = transformers.DonutImageProcessorPil()
    for height in range(1, 300, 23):
        for width in (1, 7, 64, 99, 100, 101, 250):
            image = np.zeros((3, height, width), np.uint8)
            got = thumbnail_hw(height, width, 100, 80)
            if min(got) == 0:  # refused here as a 400; the processor cannot resize to it either
                with pytest.raises(ValueError, match="Size must contain"):
                    processor.thumbnail(image, SizeDict(height=100, width=80))
                continue
            assert got == processor.thumbnail(image, SizeDict(height=100, width=80)).shape[1:], (
                height,
                width,
            )


def test_the_processor_defaults_apply_to_a_bare_config(tmp_path: Path) -> None:
    spec = page_spec(processor_folder(tmp_path, {}))
    processor = reference_processor(tmp_path)
    assert (spec.height, spec.width) == (processor.size.height, processor.size.width) == (2560, 1920)
    assert (spec.resample, spec.do_thumbnail, spec.do_pad, spec.do_align_long_axis) == (2, True, True, False)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"size": {"shortest_edge": 5}}, "unsupported Donut page size"),
        ({"do_center_crop": True}, "centre crop"),
    ],
)
def test_configs_it_cannot_follow_are_refused(tmp_path: Path, config: dict[str, Any], message: str) -> None:
    with pytest.raises(MediaConfigError, match=message):
        page_spec(processor_folder(tmp_path, config))


def test_a_page_larger_than_the_size_without_a_thumbnail_is_a_400(tmp_path: Path) -> None:
    spec = page_spec(processor_folder(tmp_path, {"size": {"height": 40, "width": 32}, "do_thumbnail": False}))
    square = decode_image(IMAGES[2], None, 10**8, "x").pixels
    assert prepare_page(square, spec, 10**8).shape == (40, 32, 3)  # the short side fits: padded
    with pytest.raises(InvalidInput, match="larger than the model's 32x40 page"):
        prepare_page(decode_image(IMAGES[3], None, 10**8, "x").pixels, spec, 10**8)


def test_a_page_too_thin_for_a_thumbnail_is_a_400(tmp_path: Path) -> None:
    spec = page_spec(processor_folder(tmp_path, {"size": {"height": 40, "width": 32}}))
    with pytest.raises(InvalidInput, match="aspect is too extreme"):
        prepare_page(np.zeros((1, 2000, 3), np.uint8), spec, 10**8)


def test_a_thin_page_enlarged_past_the_pixel_limit_is_a_400(tmp_path: Path) -> None:
    spec = page_spec(processor_folder(tmp_path, {"size": {"height": 40, "width": 32}}))
    thin = np.zeros((2, 3000, 3), np.uint8)  # its short side goes from 2 to 32: 32 x 48,000 pixels
    with pytest.raises(InvalidInput, match="over the limit of 1000000"):
        prepare_page(thin, spec, 1_000_000)
