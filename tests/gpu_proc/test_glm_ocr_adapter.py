"""GLM-OCR's page path against transformers' Glm46VProcessor (with the PIL image processor): the
frontend's prompt ids and page sizes, and the device's patches, patch grids and token types, for
pages of several sizes and aspects."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers.models.glm46v.image_processing_pil_glm46v import smart_resize as reference_resize

from sie.errors import InputTooLong
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.glm_ocr import GlmOcrAdapter
from sie.model_config import parse_model_config
from sie.page_config import PageConfigError, glm_pages
from sie.page_ocr import GLM_OCR, HEADER
from tests.gpu_proc.page_ocr_inputs import forward_inputs
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
    rng = np.random.default_rng(9)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in SIZES]


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
    adapter = adapter_of(folder)
    inputs = forward_inputs(recipe_of(folder), pages, None)
    part = range(len(pages))
    ids, _ = adapter._left_padded(inputs, part)
    got = adapter.page_inputs(inputs, part, ids)
    want = [reference.inputs(page, "Text Recognition:") for page in pages]
    assert got["image_grid_thw"].tolist() == [w["image_grid_thw"][0].tolist() for w in want]
    expected = torch.cat([w["pixel_values"] for w in want])
    np.testing.assert_allclose(got["pixel_values"].numpy(), expected.numpy(), atol=1e-5)
    for row, w in zip(got["mm_token_type_ids"], want, strict=True):  # left-padded: compare the tails
        types = w["mm_token_type_ids"][0]
        assert row[len(row) - len(types) :].tolist() == types.tolist()
        assert not row[: len(row) - len(types)].any()


def test_page_sizes_follow_glm46vs_rule(folder: Path) -> None:
    spec = glm_pages(folder)
    rng = random.Random(3)
    sizes = [(rng.randint(1, 900), rng.randint(1, 900)) for _ in range(3000)]
    sizes += [(1, 150), (150, 1), (3, 700), (28, 5600), (28, 5601), (27, 27)]
    for height, width in sizes:
        try:
            want = reference_resize(2, height, width, 2, 28, MIN_PIXELS, MAX_PIXELS)
        except ValueError:
            with pytest.raises(ValueError, match="aspect ratio"):
                spec.resized(height, width)
            continue
        got = spec.resized(height, width)
        assert got == want, (height, width)
        assert got[0] * got[1] <= spec.largest_area
        assert spec.image_tokens(*got) <= spec.most_image_tokens


def test_a_bad_page_payload_is_refused(folder: Path, pages: list[Image.Image]) -> None:
    adapter = adapter_of(folder)
    inputs = forward_inputs(recipe_of(folder), pages[:1], None)
    assert inputs.samples is not None
    short = ForwardInputs(
        inputs.input_ids,
        inputs.attention_mask,
        None,
        inputs.aux,
        inputs.lengths,
        False,
        samples=[inputs.samples[0][:-8]],
    )
    ids, _ = adapter._left_padded(short, range(1))
    with pytest.raises(ValueError, match="image tokens"):
        adapter.page_inputs(short, range(1), ids)


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
