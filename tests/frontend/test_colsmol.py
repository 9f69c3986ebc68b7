"""ColSmol's frontend half (prompts, tiles and their pixels) against transformers' Idefics3Processor
as SIE's adapter calls it (tests/tiny_models/colsmol.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.frontend.colsmol import ColSmolRecipe
from sie.frontend.media.images import decode_image
from sie.frontend.tokenize import TextTokenizer
from tests import media_samples as samples
from tests.tiny_models.colsmol import LONGEST_EDGE, TILE, make_colsmol, page_batch, query_batch

QUERIES = ["the cat", "", "Quelle est la température à Zürich ? 😀", "a\nb  c"]
IMAGES = [
    samples.jpeg(640, 480),
    samples.png_rgba(50, 90),
    samples.gif(30, 20),
    samples.webp(40, 24),
    samples.jpeg(2000, 30),  # one row of tiles
    samples.jpeg(32, 32),  # one tile: no split
    samples.jpeg(1, 1),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colsmol(tmp_path_factory.mktemp("colsmol") / "lora")


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColSmolRecipe:
    return ColSmolRecipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)


def pixels_of(data: bytes) -> np.ndarray:
    return decode_image(data, None, 10**8, "x").pixels


def test_query_ids_are_the_processors(folder: Path, recipe: ColSmolRecipe) -> None:
    encoded = recipe.queries(QUERIES)
    bounds = encoded.offsets.tolist()
    got = [encoded.input_ids[bounds[i] : bounds[i + 1]].tolist() for i in range(len(QUERIES))]
    assert got == [query_batch(folder, text)["input_ids"][0].tolist() for text in QUERIES]


def test_page_ids_are_the_processors(folder: Path, recipe: ColSmolRecipe) -> None:
    for data in IMAGES:
        page = recipe.page(pixels_of(data), "x")
        assert page.input_ids.tolist() == page_batch(folder, data)["input_ids"][0].tolist()


def test_page_frames_are_the_processors_pixel_values(folder: Path, recipe: ColSmolRecipe) -> None:
    spec = recipe.pages.pixels
    mean, std = np.asarray(spec.mean, np.float32), np.asarray(spec.std, np.float32)
    for data in IMAGES:
        pixels = recipe.page(pixels_of(data), "x").pixels
        want = page_batch(folder, data)["pixel_values"][0].numpy()  # [frames, 3, tile, tile]
        assert pixels.dtype == np.uint8 and pixels.shape == (len(want) * TILE, TILE, 3)
        # What the device does with them (sie.gpu_proc.adapters.clip.PixelNormalizer), frame by frame.
        frames = pixels.reshape(len(want), TILE, TILE, 3)
        normalized = (frames.astype(np.float32) * np.float32(spec.rescale_factor) - mean) / std
        np.testing.assert_allclose(normalized.transpose(0, 3, 1, 2), want, atol=1e-5)


def test_unit_bytes_cover_the_largest_page(recipe: ColSmolRecipe) -> None:
    assert recipe.pages.max_tiles() == (LONGEST_EDGE // TILE) ** 2 + 1
    for shape in ((5000, 5000), (100, 3000), (1, 1)):
        page = recipe.page(np.zeros((*shape, 3), np.uint8), "x")
        assert page.pixels.nbytes + 4 * len(page.input_ids) <= recipe.unit_bytes()
    assert not recipe.one_size


def test_the_family_names_this_encode_runner() -> None:
    import inspect

    from sie.families import family_of

    runner = family_of("colsmol").encode_function()
    assert inspect.iscoroutinefunction(runner)
    assert list(inspect.signature(runner).parameters) == ["state", "target", "items", "texts", "options"]


@pytest.mark.parametrize(
    "images_config",
    [{"size": {"longest_edge": TILE}}, {"do_image_splitting": False}],
    ids=["pages-of-one-tile", "no-splitting"],
)
def test_unsplit_pages_are_the_processors(
    folder: Path, tmp_path: Path, images_config: dict[str, Any]
) -> None:
    """Pages that stay one frame (the global view alone), as the folder's image processor says."""
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "processor_config.json",
        "preprocessor_config.json",
    ):
        shutil.copy(folder / name, tmp_path / name)
    for name, nested in (("preprocessor_config.json", False), ("processor_config.json", True)):
        config = json.loads((tmp_path / name).read_text())
        (config["image_processor"] if nested else config).update(images_config)
        (tmp_path / name).write_text(json.dumps(config))
    recipe = ColSmolRecipe.for_model(TextTokenizer(tmp_path / "tokenizer.json", 2048), tmp_path)
    for data in IMAGES[:3]:
        page = recipe.page(pixels_of(data), "x")
        batch = page_batch(tmp_path, data)
        assert page.pixels.shape == (TILE, TILE, 3)
        assert page.input_ids.tolist() == batch["input_ids"][0].tolist()
        normalized = (page.pixels.astype(np.float32) / 255 - 0.5) / 0.5
        np.testing.assert_allclose(
            normalized.transpose(2, 0, 1), batch["pixel_values"][0, 0].numpy(), atol=1e-5
        )
