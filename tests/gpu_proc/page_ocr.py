"""What the page OCR families' adapter tests share: items as the runner hands them to the device
(sie.frontend.tasks.page_ocr), and the checks against each family's transformers processor."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from sie.frontend.media.submit import as_words
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.page_ocr import PageOcrGenerator
from sie.page_config import GridPages
from sie.page_ocr import HEADER, Generation


def random_pages(sizes: Sequence[tuple[int, int]], seed: int = 9) -> list[Image.Image]:
    """Noise pages of `sizes` (width, height)."""
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


def forward_inputs(
    recipe: PageOcrRecipe,
    pages: list[Image.Image],
    instruction: str | None,
    task: str | None = None,
    *,
    max_new_tokens: int = 7,
) -> ForwardInputs:
    """Each page's generation header and prompt, right-padded, its resized pixels as its sample."""
    prompt = recipe.prompt_ids(
        recipe.prompt(instruction, "test", recipe.profile().task(task, "test")), "test"
    )
    tokens = [recipe.tokens(prompt, recipe.resized(np.asarray(p), "test"), "test") for p in pages]
    header = Generation(max_new_tokens).header()
    rows = [np.concatenate([header, t.input_ids]) for t in tokens]
    aux_rows = [np.concatenate([np.zeros(HEADER, np.int32), t.aux]) for t in tokens]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.int64)
    aux = torch.zeros((len(rows), width), dtype=torch.int64)
    mask = torch.zeros((len(rows), width), dtype=torch.int64)
    for i, (row, extra) in enumerate(zip(rows, aux_rows, strict=True)):
        ids[i, : len(row)] = torch.from_numpy(row)
        aux[i, : len(row)] = torch.from_numpy(extra)
        mask[i, : len(row)] = 1
    samples = [torch.from_numpy(as_words([t.pixels]).copy()) for t in tokens]
    return ForwardInputs(ids, mask, None, aux, [len(r) for r in rows], False, samples=samples)


def check_grid_inputs(
    adapter: PageOcrGenerator, recipe: PageOcrRecipe, pages: list[Image.Image], want: list[Any]
) -> None:
    """The device's patches, patch grids and token types for `pages` equal the processor's
    outputs `want` (one per page), the header set to the image token's id so that it must not be
    read as one."""
    inputs = forward_inputs(recipe, pages, None, max_new_tokens=recipe.image_token_id)
    part = range(len(pages))
    ids, _ = adapter._left_padded(inputs, part)
    got = adapter.page_inputs(inputs, part, ids)
    assert got["image_grid_thw"].tolist() == [w["image_grid_thw"][0].tolist() for w in want]
    expected = torch.cat([w["pixel_values"] for w in want])
    np.testing.assert_allclose(got["pixel_values"].numpy(), expected.numpy(), atol=1e-5)
    for row, w in zip(got["mm_token_type_ids"], want, strict=True):  # left-padded: compare the tails
        types = w["mm_token_type_ids"][0]
        assert row[len(row) - len(types) :].tolist() == types.tolist()
        assert not row[: len(row) - len(types)].any()


def check_page_sizes(spec: GridPages, reference: Callable[[int, int], tuple[int, int]]) -> None:
    """`spec` sizes 3,000 random pages and the edge cases (height, width) as `reference` does,
    within its bounds, and refuses the same pages for their aspect."""
    rng = random.Random(3)
    f = spec.factor  # one token's side: pages one token across, at the 200:1 limit and past it
    edges = [(1, 150), (150, 1), (3, 700), (f, 200 * f), (f, 200 * f + 1), (f - 1, f - 1)]
    sizes = [(rng.randint(1, 900), rng.randint(1, 900)) for _ in range(3000)] + edges
    for height, width in sizes:
        try:
            want = reference(height, width)
        except ValueError:
            with pytest.raises(ValueError, match="aspect ratio"):
                spec.resized(height, width)
            continue
        got = spec.resized(height, width)
        assert got == want, (height, width)
        assert got[0] * got[1] <= spec.largest_area
        assert spec.image_tokens(*got) <= spec.most_image_tokens


def check_short_payload_refused(adapter: PageOcrGenerator, recipe: PageOcrRecipe, page: Image.Image) -> None:
    """A page whose bytes do not fill its image tokens is a ValueError, not a wrong forward."""
    inputs = forward_inputs(recipe, [page], None)
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
