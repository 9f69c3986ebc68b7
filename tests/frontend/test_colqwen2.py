"""ColQwen2.5's frontend half (prompts, page sizes and pixels) against transformers' processor with
SIE's recipe (tests/tiny_models/colqwen2.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.colqwen2 import ColQwen2Recipe
from sie.frontend.media.images import decode_image
from sie.frontend.tokenize import TextTokenizer
from sie.page_config import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS
from tests import media_samples as samples
from tests.tiny_models.colqwen2 import (
    MERGE,
    PATCH,
    SIE_MAX_PIXELS,
    SIE_MIN_PIXELS,
    make_colqwen2,
    page_batch,
    query_batch,
)

QUERIES = ["the cat", "", "Quelle est la température à Zürich ? 😀", "a\nb  c"]
IMAGES = [
    samples.jpeg(640, 480),
    samples.png_rgba(50, 90),
    samples.gif(30, 20),
    samples.webp(1000, 900),  # over SIE's 768 visual tokens: scaled down
    samples.jpeg(2000, 30),  # long and thin
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colqwen2(tmp_path_factory.mktemp("colqwen2") / "lora")


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColQwen2Recipe:
    return ColQwen2Recipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)


def pixels_of(data: bytes) -> np.ndarray:
    return decode_image(data, None, 10**8, "x").pixels


def test_sies_pixel_bounds_replace_the_folders() -> None:
    assert (QWEN_MIN_PIXELS, QWEN_MAX_PIXELS) == (SIE_MIN_PIXELS, SIE_MAX_PIXELS)


def test_query_ids_are_the_processors(folder: Path, recipe: ColQwen2Recipe) -> None:
    encoded = recipe.queries(QUERIES)
    bounds = encoded.offsets.tolist()
    got = [encoded.input_ids[bounds[i] : bounds[i + 1]].tolist() for i in range(len(QUERIES))]
    assert got == [query_batch(folder, text)["input_ids"][0].tolist() for text in QUERIES]


def test_page_ids_are_the_processors(folder: Path, recipe: ColQwen2Recipe) -> None:
    for data in IMAGES:
        page = recipe.page(pixels_of(data), "x")
        assert page.input_ids.tolist() == page_batch(folder, data)["input_ids"][0].tolist()


def test_page_pixels_are_the_processors_before_its_patches(folder: Path, recipe: ColQwen2Recipe) -> None:
    spec = recipe.pages.pixels
    mean, std = np.asarray(spec.mean, np.float32), np.asarray(spec.std, np.float32)
    for data in IMAGES:
        pixels = recipe.page(pixels_of(data), "x").pixels
        batch = page_batch(folder, data)
        _, rows, cols = batch["image_grid_thw"][0].tolist()
        assert pixels.dtype == np.uint8 and pixels.shape == (rows * PATCH, cols * PATCH, 3)
        assert QWEN_MIN_PIXELS <= pixels.shape[0] * pixels.shape[1] <= QWEN_MAX_PIXELS
        # The processor's patches [rows x cols, 3 x 2 x 14 x 14] back to one [3, H, W] frame.
        patches = (
            batch["pixel_values"][0]
            .numpy()
            .reshape(rows // MERGE, cols // MERGE, MERGE, MERGE, 3, 2, PATCH, PATCH)
        )
        np.testing.assert_array_equal(patches[:, :, :, :, :, 0], patches[:, :, :, :, :, 1])
        frame = (
            patches[:, :, :, :, :, 0].transpose(4, 0, 2, 5, 1, 3, 6).reshape(3, rows * PATCH, cols * PATCH)
        )
        # What the device does with the pixels (sie.gpu_proc.adapters.clip.PixelNormalizer).
        normalized = (pixels.astype(np.float32) * np.float32(spec.rescale_factor) - mean) / std
        np.testing.assert_allclose(normalized.transpose(2, 0, 1), frame, atol=1e-5)


def test_a_page_over_the_aspect_ratio_limit_is_a_400(recipe: ColQwen2Recipe) -> None:
    with pytest.raises(InvalidInput, match=r"^Item 2 image 1: an image of 2010x10 pixels .* limit of 200:1"):
        recipe.page(np.zeros((10, 2010, 3), np.uint8), "Item 2 image 1")


def test_unit_bytes_cover_the_largest_page(recipe: ColQwen2Recipe) -> None:
    for shape in ((5000, 5000), (100, 19000), (28, 28)):
        page = recipe.page(np.zeros((*shape, 3), np.uint8), "x")
        assert page.pixels.nbytes + 4 * len(page.input_ids) <= recipe.unit_bytes()
    assert not recipe.one_size


def test_the_family_names_this_encode_runner() -> None:
    import inspect

    from sie.families import family_of

    runner = family_of("colqwen2").encode_function()
    assert inspect.iscoroutinefunction(runner)
    assert list(inspect.signature(runner).parameters) == ["state", "target", "items", "texts", "options"]
