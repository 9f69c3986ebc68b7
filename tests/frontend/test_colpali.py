"""ColPali's frontend half (prompts, page pixels) against transformers' ColPaliProcessor."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.frontend.colpali import ColPaliRecipe
from sie.frontend.media.images import decode_image
from sie.frontend.tokenize import TextTokenizer
from tests import media_samples as samples
from tests.tiny_models.colpali import (
    IMAGE_SEQ_LENGTH,
    make_colpali,
    reference_image_ids,
    reference_pixels,
    reference_query_ids,
)

QUERIES = ["the cat", "", "Quelle est la température à Zürich ? 😀", "a\nb  c"]
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.gif(30, 20), samples.webp(40, 24)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colpali(tmp_path_factory.mktemp("colpali"))


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColPaliRecipe:
    return ColPaliRecipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)


def test_query_ids_are_the_processors(folder: Path, recipe: ColPaliRecipe) -> None:
    encoded = recipe.queries(QUERIES)
    bounds = encoded.offsets.tolist()
    got = [encoded.input_ids[bounds[i] : bounds[i + 1]].tolist() for i in range(len(QUERIES))]
    assert got == reference_query_ids(folder, QUERIES)


def test_page_ids_are_the_processors(folder: Path, recipe: ColPaliRecipe) -> None:
    assert recipe.image_ids.tolist() == reference_image_ids(folder, IMAGES[0])
    assert recipe.image_ids[:IMAGE_SEQ_LENGTH].tolist() == [recipe.image_ids[0]] * IMAGE_SEQ_LENGTH


def test_page_pixels_normalize_to_the_processors_pixel_values(folder: Path, recipe: ColPaliRecipe) -> None:
    spec = recipe.spec
    mean, std = np.asarray(spec.mean, np.float32), np.asarray(spec.std, np.float32)
    for data, want in zip(IMAGES, reference_pixels(folder, IMAGES), strict=True):
        pixels = recipe.page(decode_image(data, None, 10**8, "x").pixels).pixels
        assert pixels.dtype == np.uint8 and pixels.shape == (spec.height, spec.width, 3)
        # What the device does with them (sie.gpu_proc.adapters.clip.PixelNormalizer).
        normalized = (pixels.astype(np.float32) * np.float32(spec.rescale_factor) - mean) / std
        np.testing.assert_allclose(normalized.transpose(2, 0, 1), want, atol=1e-5)


def test_unit_bytes_cover_the_pixels_and_the_prompt(recipe: ColPaliRecipe) -> None:
    assert recipe.unit_bytes() == recipe.spec.height * recipe.spec.width * 3 + 4 * len(recipe.image_ids)


def test_the_family_names_this_encode_runner() -> None:
    import inspect

    from sie.families import family_of

    runner = family_of("colpali").encode_function()
    assert inspect.iscoroutinefunction(runner)
    assert list(inspect.signature(runner).parameters) == ["state", "target", "items", "texts", "options"]
