"""MinerU2.5's page path against transformers' Qwen2VLProcessor (with the PIL image processor): the
frontend's prompt ids and page sizes, and the device's patches, patch grids and token types, for
pages of several sizes and aspects."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference_resize

from sie.errors import InvalidInput
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.mineru_vl import MinerUVlAdapter
from sie.model_config import parse_model_config
from sie.page_config import qwen_pages
from sie.page_ocr import HEADER, MINERU_VL
from tests.gpu_proc.page_ocr import (
    check_grid_inputs,
    check_page_sizes,
    check_short_payload_refused,
    forward_inputs,
    random_pages,
)
from tests.tiny_models.mineru_vl import (
    MAX_PIXELS,
    MIN_PIXELS,
    Reference,
    make_mineru_vl,
    model_yaml_mineru_vl,
)

# (width, height): over the budget, under it, a side under one token, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (10, 90), (40, 200), (28, 28), (126, 98), (113, 57)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_mineru_vl(tmp_path_factory.mktemp("mineru"), seed=2)


@pytest.fixture(scope="module")
def reference(folder: Path) -> Reference:
    return Reference(folder)


@pytest.fixture(scope="module")
def pages() -> list[Image.Image]:
    return random_pages(SIZES)


def recipe_of(folder: Path) -> PageOcrRecipe:
    return PageOcrRecipe.for_model(parse_model_config(model_yaml_mineru_vl("tiny/mineru", folder)), MINERU_VL)


def adapter_of(folder: Path) -> MinerUVlAdapter:
    adapter = load_adapter(parse_model_config(model_yaml_mineru_vl("tiny/mineru", folder)), folder, "cpu")
    assert isinstance(adapter, MinerUVlAdapter)
    return adapter


@pytest.mark.parametrize(
    ("instruction", "task"), [(None, None), (None, "[layout]"), ("Read the table.", "table")]
)
def test_prompt_ids_match_the_processor(
    folder: Path,
    reference: Reference,
    pages: list[Image.Image],
    instruction: str | None,
    task: str | None,
) -> None:
    inputs = forward_inputs(recipe_of(folder), pages, instruction, task)
    text = instruction or {None: "\nText Recognition:", "[layout]": "\nLayout Detection:"}[task]
    for i, page in enumerate(pages):
        want = reference.inputs(page, text)["input_ids"][0]
        assert inputs.input_ids[i, HEADER : inputs.lengths[i]].tolist() == want.tolist()


def test_patches_grids_and_token_types_match_the_processor(
    folder: Path, reference: Reference, pages: list[Image.Image]
) -> None:
    want = [reference.inputs(page, "\nText Recognition:") for page in pages]
    check_grid_inputs(adapter_of(folder), recipe_of(folder), pages, want)


def test_page_sizes_follow_qwen2_vls_rule(folder: Path) -> None:
    reference = lambda height, width: reference_resize(height, width, 28, MIN_PIXELS, MAX_PIXELS)  # noqa: E731
    check_page_sizes(qwen_pages(folder), reference)


def test_a_bad_page_payload_is_refused(folder: Path, pages: list[Image.Image]) -> None:
    check_short_payload_refused(adapter_of(folder), recipe_of(folder), pages[0])


def test_tasks_pick_the_prompt_and_the_label(folder: Path) -> None:
    profile = recipe_of(folder).profile()
    assert [profile.task(None, "t"), profile.task("chart", "t")] == ["[default]", "chart"]
    tasks = ("[default]", "table", "equation", "image", "chart", "[layout]")
    assert [profile.label(t) for t in tasks] == [
        "mineru_text",
        "mineru_table",
        "mineru_equation",
        "mineru_image",
        "mineru_chart",
        "mineru_layout",
    ]
    for bad in ("default", "layout", "ocr", 3):
        with pytest.raises(InvalidInput, match=r"options\.task"):
            profile.task(bad, "options.task")
