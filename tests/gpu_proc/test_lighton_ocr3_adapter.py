"""LightOnOCR-3's page path against transformers' Qwen3VLProcessor (with the PIL Qwen2-VL image
processor): the frontend's prompt ids (its chat template without thinking) and page sizes, and the
device's patches, patch grids and token types, for pages of several sizes and aspects."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference_resize

from sie.errors import InvalidInput
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.lighton_ocr3 import LightOnOcr3Adapter
from sie.model_config import parse_model_config
from sie.page_config import qwen_pages
from sie.page_ocr import HEADER, LIGHTON_OCR3
from tests.gpu_proc.page_ocr import (
    check_grid_inputs,
    check_page_sizes,
    check_short_payload_refused,
    forward_inputs,
    random_pages,
)
from tests.tiny_models.lighton_ocr3 import (
    MAX_PIXELS,
    MIN_PIXELS,
    Reference,
    make_lighton_ocr3,
    model_yaml_lighton_ocr3,
)

# (width, height): over the budget, under it, narrow, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (20, 90), (40, 200), (32, 32), (126, 98), (113, 57)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_lighton_ocr3(tmp_path_factory.mktemp("lo3"), seed=2)


@pytest.fixture(scope="module")
def reference(folder: Path) -> Reference:
    return Reference(folder)


@pytest.fixture(scope="module")
def pages() -> list[Image.Image]:
    return random_pages(SIZES)


def recipe_of(folder: Path) -> PageOcrRecipe:
    return PageOcrRecipe.for_model(
        parse_model_config(model_yaml_lighton_ocr3("tiny/lo3", folder)), LIGHTON_OCR3
    )


def adapter_of(folder: Path) -> LightOnOcr3Adapter:
    adapter = load_adapter(parse_model_config(model_yaml_lighton_ocr3("tiny/lo3", folder)), folder, "cpu")
    assert isinstance(adapter, LightOnOcr3Adapter)
    return adapter


@pytest.mark.parametrize("instruction", [None, "grounding"])
def test_prompt_ids_match_the_processor(
    folder: Path, reference: Reference, pages: list[Image.Image], instruction: str | None
) -> None:
    inputs = forward_inputs(recipe_of(folder), pages, instruction)
    for i, page in enumerate(pages):
        want = reference.inputs(page, instruction)["input_ids"][0]
        assert inputs.input_ids[i, HEADER : inputs.lengths[i]].tolist() == want.tolist()


def test_patches_grids_and_token_types_match_the_processor(
    folder: Path, reference: Reference, pages: list[Image.Image]
) -> None:
    want = [reference.inputs(page, None) for page in pages]
    check_grid_inputs(adapter_of(folder), recipe_of(folder), pages, want)


def test_page_sizes_follow_qwen2_vls_rule(folder: Path) -> None:
    reference = lambda height, width: reference_resize(height, width, 32, MIN_PIXELS, MAX_PIXELS)  # noqa: E731
    check_page_sizes(qwen_pages(folder), reference)


def test_a_bad_page_payload_is_refused(folder: Path, pages: list[Image.Image]) -> None:
    check_short_payload_refused(adapter_of(folder), recipe_of(folder), pages[0])


def test_only_its_trained_instructions_are_taken(folder: Path) -> None:
    profile = recipe_of(folder).profile()
    for fine in (None, "", "grounding"):
        profile.check_instruction(fine, "LightOnOCR-3")
    for bad in ("Grounding", "grounding ", "Transcribe the table."):
        with pytest.raises(InvalidInput, match="page alone or with 'grounding'"):
            profile.check_instruction(bad, "LightOnOCR-3")
    assert (profile.temperature, profile.top_p, dict(profile.template_kwargs)) == (
        0.1,
        1.0,
        {"enable_thinking": False},
    )
