"""LightOnOCR's page path against transformers' LightOnOcrProcessor (with the PIL Pixtral image
processor): the frontend's prompt ids and resized page, and the device's normalized pixels and page
sizes, for pages of several sizes and aspects."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.lighton_ocr import LightOnOcrAdapter
from sie.model_config import parse_model_config
from sie.page_config import pixtral_pages
from sie.page_ocr import HEADER, LIGHTON_OCR
from tests.gpu_proc.page_ocr import check_short_payload_refused, forward_inputs, random_pages
from tests.tiny_models.lighton_ocr import Reference, make_lighton_ocr, model_yaml_lighton_ocr

SYSTEM = "You are an OCR engine. Return the markdown representation of the document."
SIZES = [(100, 70), (300, 160), (40, 200), (28, 28), (126, 98), (113, 57)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_lighton_ocr(tmp_path_factory.mktemp("lighton"), seed=2)


@pytest.fixture(scope="module")
def pages() -> list[Image.Image]:
    return random_pages(SIZES)


def recipe_of(folder: Path) -> PageOcrRecipe:
    config = parse_model_config(model_yaml_lighton_ocr("tiny/lighton", folder))
    return PageOcrRecipe.for_model(config, LIGHTON_OCR)


def test_prompt_ids_match_the_processor(folder: Path, pages: list[Image.Image]) -> None:
    recipe, reference = recipe_of(folder), Reference(folder, SYSTEM)
    for instruction in (None, "Only the table, please."):
        inputs = forward_inputs(recipe, pages, instruction)
        for i, page in enumerate(pages):
            content: list[dict[str, str]] = [{"type": "image"}]
            if instruction:
                content.append({"type": "text", "text": instruction})
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
            text = reference.processor.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
            want = reference.processor(text=text, images=[page], return_tensors="pt")["input_ids"][0]
            got = inputs.input_ids[i, HEADER : inputs.lengths[i]]
            assert got.tolist() == want.tolist()


def test_pages_match_the_processors_pixel_values_and_sizes(folder: Path, pages: list[Image.Image]) -> None:
    recipe, reference = recipe_of(folder), Reference(folder, SYSTEM)
    adapter = load_adapter(parse_model_config(model_yaml_lighton_ocr("tiny/lighton", folder)), folder, "cpu")
    assert isinstance(adapter, LightOnOcrAdapter)
    inputs = forward_inputs(recipe, pages, None)
    got, sizes = adapter.pages(inputs, range(len(pages)))
    want = reference.processor.image_processor(pages, return_tensors="pt")
    assert sizes.tolist() == want["image_sizes"].tolist()
    np.testing.assert_allclose(got.numpy(), want["pixel_values"].numpy(), atol=1e-5)


def test_page_sizes_follow_pixtrals_rule(folder: Path) -> None:
    spec = pixtral_pages(folder)
    assert spec.resized(70, 100) == (70, 112)  # no side over 112; each rounded up to 14
    assert spec.resized(160, 300) == (70, 112)  # 300 -> 112, 160 -> floor(59.7) = 59 -> 70
    assert spec.resized(200, 40) == (112, 28)  # 40 / (200 / 112) = 22.4 -> 22 -> 28
    assert spec.token_grid(70, 112) == (2, 4)


def test_a_bad_page_payload_is_refused(folder: Path, pages: list[Image.Image]) -> None:
    adapter = load_adapter(parse_model_config(model_yaml_lighton_ocr("tiny/lighton", folder)), folder, "cpu")
    assert isinstance(adapter, LightOnOcrAdapter)
    check_short_payload_refused(adapter, recipe_of(folder), pages[0])


def test_a_preprocessor_config_json_is_read_as_well(folder: Path, tmp_path: Path) -> None:
    import json
    import shutil

    copy = shutil.copytree(folder, tmp_path / "copy")
    settings = json.loads((copy / "processor_config.json").read_text())["image_processor"]
    (copy / "processor_config.json").unlink()
    (copy / "preprocessor_config.json").write_text(json.dumps({**settings, "size": {"longest_edge": 56}}))
    assert pixtral_pages(copy).resized(70, 100) == (42, 56)
    (copy / "preprocessor_config.json").unlink()
    with pytest.raises(ValueError, match="processor_config"):
        pixtral_pages(copy)
