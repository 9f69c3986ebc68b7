"""LightOnOCR-3's page path against transformers' Qwen3VLProcessor (with the PIL Qwen2-VL image
processor): the frontend's prompt ids (its chat template without thinking) and page sizes, and the
device's patches, patch grids and token types, for pages of several sizes and aspects."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize as reference_resize

from sie.errors import InvalidInput
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.lighton_ocr3 import LightOnOcr3Adapter
from sie.model_config import parse_model_config
from sie.page_config import qwen_pages
from sie.page_ocr import HEADER, LIGHTON_OCR3
from tests.gpu_proc.page_ocr_inputs import forward_inputs
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
    rng = np.random.default_rng(9)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in SIZES]


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
    adapter = adapter_of(folder)
    inputs = forward_inputs(recipe_of(folder), pages, None)
    part = range(len(pages))
    ids, _ = adapter._left_padded(inputs, part)
    got = adapter.page_inputs(inputs, part, ids)
    want = [reference.inputs(page) for page in pages]
    assert got["image_grid_thw"].tolist() == [w["image_grid_thw"][0].tolist() for w in want]
    expected = torch.cat([w["pixel_values"] for w in want])
    np.testing.assert_allclose(got["pixel_values"].numpy(), expected.numpy(), atol=1e-5)
    for row, w in zip(got["mm_token_type_ids"], want, strict=True):  # left-padded: compare the tails
        types = w["mm_token_type_ids"][0]
        assert row[len(row) - len(types) :].tolist() == types.tolist()
        assert not row[: len(row) - len(types)].any()


def test_page_sizes_follow_qwen2_vls_rule(folder: Path) -> None:
    spec = qwen_pages(folder)
    rng = random.Random(3)
    sizes = [(rng.randint(1, 900), rng.randint(1, 900)) for _ in range(3000)]
    sizes += [(1, 150), (150, 1), (3, 700), (32, 6400), (32, 6401), (27, 27)]
    for height, width in sizes:
        try:
            want = reference_resize(height, width, 32, MIN_PIXELS, MAX_PIXELS)
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


def test_only_its_trained_instructions_are_taken(folder: Path) -> None:
    profile = recipe_of(folder).profile
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
