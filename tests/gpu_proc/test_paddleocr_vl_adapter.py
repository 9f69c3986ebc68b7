"""PaddleOCR-VL's page path against transformers' PaddleOCRVLProcessor (with the PIL image processor):
the frontend's prompt ids and page sizes, and the device's patches, patch grids and token types, for
pages of several sizes and aspects."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image
from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
    smart_resize as reference_resize,
)

from sie.errors import InvalidInput
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.paddleocr_vl import PaddleOcrVlAdapter
from sie.model_config import parse_model_config
from sie.page_config import PageConfigError, paddle_pages
from sie.page_ocr import HEADER, PADDLEOCR_VL
from tests.gpu_proc.page_ocr import (
    check_grid_inputs,
    check_page_sizes,
    check_short_payload_refused,
    forward_inputs,
    random_pages,
)
from tests.tiny_models.paddleocr_vl import (
    MAX_PIXELS,
    MIN_PIXELS,
    Reference,
    make_paddleocr_vl,
    model_yaml_paddleocr_vl,
)

# (width, height): over the budget, under it, a side under one token, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (10, 90), (40, 200), (28, 28), (126, 98), (113, 57)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_paddleocr_vl(tmp_path_factory.mktemp("paddle"), seed=2)


@pytest.fixture(scope="module")
def reference(folder: Path) -> Reference:
    return Reference(folder)


@pytest.fixture(scope="module")
def pages() -> list[Image.Image]:
    return random_pages(SIZES)


def recipe_of(folder: Path) -> PageOcrRecipe:
    return PageOcrRecipe.for_model(
        parse_model_config(model_yaml_paddleocr_vl("tiny/paddle", folder)), PADDLEOCR_VL
    )


def adapter_of(folder: Path) -> PaddleOcrVlAdapter:
    adapter = load_adapter(parse_model_config(model_yaml_paddleocr_vl("tiny/paddle", folder)), folder, "cpu")
    assert isinstance(adapter, PaddleOcrVlAdapter)
    return adapter


@pytest.mark.parametrize(("instruction", "task"), [(None, None), (None, "seal"), ("Read the table.", "ocr")])
def test_prompt_ids_match_the_processor(
    folder: Path,
    reference: Reference,
    pages: list[Image.Image],
    instruction: str | None,
    task: str | None,
) -> None:
    inputs = forward_inputs(recipe_of(folder), pages, instruction, task)
    text = instruction or {None: "OCR:", "seal": "Seal Recognition:", "ocr": "OCR:"}[task]
    for i, page in enumerate(pages):
        want = reference.inputs(page, text)["input_ids"][0]
        assert inputs.input_ids[i, HEADER : inputs.lengths[i]].tolist() == want.tolist()


def test_patches_grids_and_token_types_match_the_processor(
    folder: Path, reference: Reference, pages: list[Image.Image]
) -> None:
    want = [reference.inputs(page, "OCR:") for page in pages]
    check_grid_inputs(adapter_of(folder), recipe_of(folder), pages, want)


def test_page_sizes_follow_paddleocr_vls_rule(folder: Path) -> None:
    reference = lambda height, width: reference_resize(height, width, 28, MIN_PIXELS, MAX_PIXELS)  # noqa: E731
    check_page_sizes(paddle_pages(folder), reference)


def test_a_bad_page_payload_is_refused(folder: Path, pages: list[Image.Image]) -> None:
    check_short_payload_refused(adapter_of(folder), recipe_of(folder), pages[0])


def test_a_folder_without_pixel_bounds_gets_the_processors_and_size_is_read_too(
    folder: Path, tmp_path: Path
) -> None:
    import json
    import shutil

    copy = shutil.copytree(folder, tmp_path / "copy")
    settings = json.loads((copy / "preprocessor_config.json").read_text())
    bare = {k: v for k, v in settings.items() if k not in ("min_pixels", "max_pixels")}
    (copy / "preprocessor_config.json").write_text(json.dumps(bare))
    assert (paddle_pages(copy).min_pixels, paddle_pages(copy).max_pixels) == (384 * 384, 1536 * 1536)
    sized = {**bare, "size": {"shortest_edge": 56 * 56, "longest_edge": 200 * 200}}
    (copy / "preprocessor_config.json").write_text(json.dumps(sized))
    assert (paddle_pages(copy).min_pixels, paddle_pages(copy).max_pixels) == (56 * 56, 200 * 200)
    (copy / "preprocessor_config.json").write_text(json.dumps({**sized, "max_pixels": 10}))
    with pytest.raises(PageConfigError, match="pixel counts"):
        paddle_pages(copy)


def test_tasks_pick_the_prompt_and_the_label(folder: Path) -> None:
    prompts = recipe_of(folder).profile()
    assert [prompts.task(None, "t"), prompts.task("chart", "t")] == ["ocr", "chart"]
    assert [prompts.label(t) for t in ("ocr", "table", "formula", "chart", "spotting", "seal")] == [
        *["markdown"] * 4,
        "spotting",
        "seal",
    ]
    for bad in ("OCR", "layout", 3):
        with pytest.raises(InvalidInput, match=r"options\.task"):
            prompts.task(bad, "options.task")
