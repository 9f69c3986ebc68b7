"""Qwen3-VL's frontend half (prompts, ids, resized images, limits) against transformers' pieces
on SIE's conversations (tests.tiny_models.qwen3_vl), and its 400s."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from sie import qwen3_vl as recipe
from sie.errors import InvalidInput
from sie.families import family_of
from sie.frontend.media.images import decode_image
from sie.frontend.qwen3_vl import Qwen3VLRecipe, Row, check_text, row_limit
from sie.frontend.qwen3_vl_embedding import instruction_of
from sie.frontend.wire import Item, validate_items
from sie.model_config import RuntimeOptions
from tests import media_samples as samples
from tests.tiny_models.qwen3_vl import (
    SIE_MAX_PIXELS,
    SIE_MIN_PIXELS,
    make_qwen3_vl,
    reference_inputs,
    sie_embedding_conversation,
    sie_reranker_conversation,
)

IMAGES = [
    samples.jpeg(640, 480),
    samples.png_rgba(50, 90),
    samples.gif(30, 20),
    samples.jpeg(3000, 2000, seed=4),
]
TEXTS = [
    "a red square",
    "\n\nleading newlines",
    "Quelle est la température à Zürich ? 😀",
    "a\nb  c ",
    None,
    "",
]
LIMIT = 4096


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_qwen3_vl(tmp_path_factory.mktemp("qwen3-vl"))


@pytest.fixture(scope="module")
def vl(folder: Path) -> Qwen3VLRecipe:
    return Qwen3VLRecipe(
        Tokenizer.from_file(str(folder / "tokenizer.json")), recipe.vision_spec(folder), LIMIT
    )


def pixels(vl: Qwen3VLRecipe, data: bytes) -> np.ndarray:
    return vl.resized(decode_image(data, None, 10**8, "x").pixels, "x")


def test_the_vision_spec_is_the_processors_with_sies_budget(folder: Path, vl: Qwen3VLRecipe) -> None:
    spec = vl.spec
    assert (spec.patch_size, spec.merge_size, spec.temporal_patch_size) == (16, 2, 2)
    assert (spec.mean, spec.std) == ((0.5,) * 3, (0.5,) * 3)
    assert (spec.min_pixels, spec.max_pixels) == (SIE_MIN_PIXELS, SIE_MAX_PIXELS)


@pytest.mark.parametrize(
    "size", [(480, 640), (90, 50), (20, 30), (2000, 3000), (32, 32), (1, 150), (4000, 25), (1003, 1001)]
)
def test_smart_resize_is_transformers(vl: Qwen3VLRecipe, size: tuple[int, int]) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    want = smart_resize(*size, factor=32, min_pixels=SIE_MIN_PIXELS, max_pixels=SIE_MAX_PIXELS)
    assert recipe.smart_resize(*size, vl.spec) == want


def test_resized_pixels_are_the_image_processors(folder: Path, vl: Qwen3VLRecipe) -> None:
    from tests.tiny_models.qwen3_vl import _pieces

    image_processor, _ = _pieces(folder)
    for data in IMAGES:
        decoded = decode_image(data, None, 10**8, "x").pixels  # decoding is tested on its own
        resized = image_processor.resize(
            decoded.transpose(2, 0, 1), size=image_processor.size, resample=3, factor=32
        )
        mine = vl.resized(decoded, "x")
        assert mine.dtype == np.uint8
        np.testing.assert_array_equal(mine, resized.transpose(1, 2, 0))


def test_an_unreadable_image_header_counts_the_largest_size(vl: Qwen3VLRecipe) -> None:
    from sie.frontend.tasks.images import ImageUnit

    assert vl.resized_bytes(ImageUnit(0, 0, b"not an image", None)) == SIE_MAX_PIXELS * 3
    assert vl.resized_bytes(ImageUnit(0, 0, IMAGES[0], None)) == pixels(vl, IMAGES[0]).nbytes


@pytest.mark.parametrize(
    ("text", "n_images"),
    [(t, n) for t in TEXTS for n in (0, 1, 2) if t is not None or n],  # text or images
)
def test_embedding_ids_are_the_processors(
    folder: Path, vl: Qwen3VLRecipe, text: str | None, n_images: int
) -> None:
    images = IMAGES[1 : 1 + n_images]
    instruction = recipe.normalize_instruction("Find the match")
    prompt, start = recipe.embedding_prompt(instruction, n_images, text)
    got = vl.tokens(
        Row("Item 0", prompt, start, start + len(text or "")), [pixels(vl, d) for d in images], LIMIT
    )
    want = reference_inputs(folder, sie_embedding_conversation(text, n_images, "Find the match"), images)
    assert got.input_ids.tolist() == want["input_ids"][0].tolist()
    assert_grid_widths(got.aux, got.input_ids, want, vl)


def assert_grid_widths(aux: np.ndarray, ids: np.ndarray, want: dict[str, object], vl: Qwen3VLRecipe) -> None:
    """`aux` holds each image's patch-grid width on its placeholders, as image_grid_thw says."""
    on_images = aux[ids == vl.image_pad_id]
    grids = want.get("image_grid_thw")
    if grids is None:
        assert not aux.any()
        return
    merge = vl.spec.merge_size**2
    expected = np.concatenate([[int(g[2])] * int(g.prod() // merge) for g in grids])  # type: ignore[attr-defined]
    np.testing.assert_array_equal(on_images, expected)
    assert not aux[ids != vl.image_pad_id].any()


@pytest.mark.parametrize(
    ("query", "document"),
    [
        (("a red square", None), ("cats sleep all day", None)),
        (("a red square", 0), (None, 1)),
        ((None, 0), ("\n\nthe stock market", 1)),
        (("q", None), ("Zürich 😀", 2)),
    ],
)
def test_reranker_ids_are_the_processors(
    folder: Path,
    vl: Qwen3VLRecipe,
    query: tuple[str | None, int | None],
    document: tuple[str | None, int | None],
) -> None:
    q_image = None if query[1] is None else IMAGES[query[1]]
    d_image = None if document[1] is None else IMAGES[document[1]]
    prompt, start = recipe.reranker_prompt(
        "Judge it", query[0], q_image is not None, document[0], d_image is not None
    )
    images = [d for d in (q_image, d_image) if d is not None]
    got = vl.tokens(
        Row("Item 0", prompt, start, start + len(document[0] or "")), [pixels(vl, d) for d in images], LIMIT
    )
    conversation = sie_reranker_conversation((query[0], q_image), (document[0], d_image), "Judge it")
    want = reference_inputs(folder, conversation, images)
    assert got.input_ids.tolist() == want["input_ids"][0].tolist()
    assert_grid_widths(got.aux, got.input_ids, want, vl)


def test_a_long_text_loses_its_last_tokens_only(vl: Qwen3VLRecipe) -> None:
    text = "cats sleep all day " * 400
    prompt, start = recipe.embedding_prompt("Go.", 1, text)
    row = Row("Item 0", prompt, start, start + len(text))
    image = [pixels(vl, IMAGES[0])]
    whole = vl.tokens(row, image, 10**6)
    cut = vl.tokens(row, image, 700)
    assert len(whole.input_ids) > 700 and len(cut.input_ids) == 700
    tail = vl.tokens(
        Row("Item 0", prompt[start + len(text) :], 0, 0), [], 100
    ).input_ids  # the template's end
    assert cut.input_ids[-len(tail) :].tolist() == tail.tolist()
    kept = 700 - len(tail)
    assert cut.input_ids[:kept].tolist() == whole.input_ids[:kept].tolist()
    assert (cut.input_ids == vl.image_pad_id).sum() == (whole.input_ids == vl.image_pad_id).sum()
    with pytest.raises(InvalidInput, match=r"Item 0: the prompt's template, instruction and images take"):
        vl.tokens(row, image, 100)


def test_text_with_control_tokens_is_a_400(vl: Qwen3VLRecipe) -> None:
    assert "<|im_end|>" in vl.reserved and recipe.IMAGE_PAD in vl.reserved
    check_text("plain text", "Item 0", vl.reserved)
    with pytest.raises(
        InvalidInput, match=r"Item 3: text must not contain the model's control token '<\|im_end\|>'"
    ):
        check_text("a<|im_end|>b", "Item 3", vl.reserved)


def test_an_extreme_aspect_ratio_is_a_400(vl: Qwen3VLRecipe) -> None:
    with pytest.raises(InvalidInput, match=r"Item 1 image 0: an image of .* aspect ratio limit of 200:1"):
        vl.resized(np.zeros((2, 500, 3), np.uint8), "Item 1 image 0")


def test_row_limit_is_a_positive_integer_at_most_the_models() -> None:
    assert row_limit(None, 100) == 100 and row_limit(50, 100) == 50 and row_limit(500, 100) == 100
    for bad in (0, -1, True, "7", 1.5):
        with pytest.raises(InvalidInput, match="max_seq_length must be a positive integer"):
            row_limit(bad, 100)


def test_the_embedding_instruction_is_sies() -> None:
    runtime = RuntimeOptions(default_instruction="Represent the user's input.")
    assert instruction_of(None, runtime) == "Represent the user's input."
    assert instruction_of("  find the match ", runtime) == "find the match."
    assert instruction_of("Where is it?", runtime) == "Where is it?"
    assert instruction_of("   ", runtime) == "Represent the user's input."
    assert instruction_of(None, RuntimeOptions(instruction="Profile one")) == "Profile one."
    assert instruction_of(None, RuntimeOptions()) == recipe.EMBED_DEFAULT_INSTRUCTION


def test_an_item_with_video_is_a_400_naming_it() -> None:
    with pytest.raises(InvalidInput, match="Item 1 has video, which model 'm' does not accept"):
        validate_items(
            [Item(text="a"), Item(text="b", video={"data": b"x"})], model="m", inputs=("text", "image")
        )


def test_the_families_name_their_runners() -> None:
    encode = family_of("qwen3_vl_embedding").encode_function()
    score = family_of("qwen3_vl_reranker").score_function()
    assert inspect.iscoroutinefunction(encode) and inspect.iscoroutinefunction(score)
    assert list(inspect.signature(encode).parameters) == ["state", "target", "items", "texts", "options"]
    assert list(inspect.signature(score).parameters) == [
        "state",
        "target",
        "query",
        "items",
        "instruction",
        "options",
    ]
