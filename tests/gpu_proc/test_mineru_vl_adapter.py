"""MinerU2.5's page path against transformers' Qwen2VLProcessor (with the PIL image processor): the
frontend's prompt ids and page sizes, and the device's patches, patch grids and token types, for
pages of several sizes and aspects."""

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
from sie.gpu_proc.adapters.mineru_vl import MinerUVlAdapter
from sie.model_config import parse_model_config
from sie.page_config import qwen_pages
from sie.page_ocr import HEADER, MINERU_VL
from tests.gpu_proc.page_ocr_inputs import forward_inputs
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
    rng = np.random.default_rng(9)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in SIZES]


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
    adapter = adapter_of(folder)
    # max_new_tokens equal to the image token's id: the device must not read the header as one.
    recipe = recipe_of(folder)
    inputs = forward_inputs(recipe, pages, None, max_new_tokens=recipe.image_token_id)
    part = range(len(pages))
    ids, _ = adapter._left_padded(inputs, part)
    got = adapter.page_inputs(inputs, part, ids)
    want = [reference.inputs(page, "\nText Recognition:") for page in pages]
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
    sizes += [(1, 150), (150, 1), (3, 700), (28, 5600), (28, 5601), (27, 27)]
    for height, width in sizes:
        try:
            want = reference_resize(height, width, 28, MIN_PIXELS, MAX_PIXELS)
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


def test_tasks_pick_the_prompt_and_the_label(folder: Path) -> None:
    profile = recipe_of(folder).profile
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
