"""GLM-OCR's page path against transformers' Glm46VProcessor (with the PIL image processor): the
frontend's prompt ids and page sizes, and the device's patches, patch grids and token types, for
pages of several sizes and aspects."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transformers.models.glm46v.image_processing_pil_glm46v import smart_resize as reference_resize

from sie.errors import InputTooLong
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.glm_ocr import GlmOcrAdapter
from sie.model_config import parse_model_config
from sie.page_config import PageConfigError, glm_pages
from sie.page_ocr import GLM_OCR, HEADER
from tests.gpu_proc.page_ocr import (
    check_grid_inputs,
    check_page_sizes,
    check_short_payload_refused,
    forward_inputs,
    random_pages,
)
from tests.tiny_models.glm_ocr import MAX_PIXELS, MIN_PIXELS, Reference, make_glm_ocr, model_yaml_glm_ocr

# (width, height): over the budget, under it, a side under one token, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (10, 90), (40, 200), (28, 28), (126, 98), (113, 57)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_glm_ocr(tmp_path_factory.mktemp("glm"), seed=2)


@pytest.fixture(scope="module")
def reference(folder: Path) -> Reference:
    return Reference(folder)


@pytest.fixture(scope="module")
def pages() -> list[Image.Image]:
    return random_pages(SIZES)


def recipe_of(folder: Path) -> PageOcrRecipe:
    return PageOcrRecipe.for_model(parse_model_config(model_yaml_glm_ocr("tiny/glm", folder)), GLM_OCR)


def adapter_of(folder: Path) -> GlmOcrAdapter:
    adapter = load_adapter(parse_model_config(model_yaml_glm_ocr("tiny/glm", folder)), folder, "cpu")
    assert isinstance(adapter, GlmOcrAdapter)
    return adapter


@pytest.mark.parametrize("instruction", [None, "Table Recognition:"])
def test_prompt_ids_match_the_processor(
    folder: Path, reference: Reference, pages: list[Image.Image], instruction: str | None
) -> None:
    inputs = forward_inputs(recipe_of(folder), pages, instruction)
    for i, page in enumerate(pages):
        want = reference.inputs(page, instruction or "Text Recognition:")["input_ids"][0]
        assert inputs.input_ids[i, HEADER : inputs.lengths[i]].tolist() == want.tolist()


def test_patches_grids_and_token_types_match_the_processor(
    folder: Path, reference: Reference, pages: list[Image.Image]
) -> None:
    want = [reference.inputs(page, "Text Recognition:") for page in pages]
    check_grid_inputs(adapter_of(folder), recipe_of(folder), pages, want)


def test_page_sizes_follow_glm46vs_rule(folder: Path) -> None:
    reference = lambda height, width: reference_resize(2, height, width, 2, 28, MIN_PIXELS, MAX_PIXELS)  # noqa: E731
    check_page_sizes(glm_pages(folder), reference)


def test_a_bad_page_payload_is_refused(folder: Path, pages: list[Image.Image]) -> None:
    check_short_payload_refused(adapter_of(folder), recipe_of(folder), pages[0])


def test_a_folder_without_pixel_bounds_gets_the_processors_and_bad_ones_are_refused(
    folder: Path, tmp_path: Path
) -> None:
    import json
    import shutil

    copy = shutil.copytree(folder, tmp_path / "copy")
    settings = json.loads((copy / "preprocessor_config.json").read_text())
    (copy / "preprocessor_config.json").write_text(
        json.dumps({k: v for k, v in settings.items() if k != "size"})
    )
    assert (glm_pages(copy).min_pixels, glm_pages(copy).max_pixels) == (112 * 112, 28 * 28 * 15000)
    (copy / "preprocessor_config.json").write_text(
        json.dumps({**settings, "size": {"shortest_edge": 9000, "longest_edge": 10}})
    )
    with pytest.raises(PageConfigError, match="pixel counts"):
        glm_pages(copy)


def test_a_page_and_prompt_over_the_models_limit_is_413(folder: Path, pages: list[Image.Image]) -> None:
    recipe = recipe_of(folder)
    ids = recipe.prompt_ids(recipe.prompt(None, "t"), "t")
    page = recipe.resized(np.asarray(pages[0]), "Item 0")
    fits = len(ids) - 1 + recipe.pages.image_tokens(*page.shape[:2])
    recipe.limit = fits
    assert len(recipe.tokens(ids, page, "Item 0").input_ids) == fits
    recipe.limit = fits - 1
    with pytest.raises(InputTooLong, match=f"Item 0: the page and prompt take {fits} tokens"):
        recipe.tokens(ids, page, "Item 0")
