"""Page OCR items as the runner hands them to the device (sie.frontend.tasks.page_ocr): each page's
generation header and prompt, right-padded, with its resized pixels as the item's sample bytes."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from sie.frontend.media.submit import as_words
from sie.frontend.page_ocr import PageOcrRecipe
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.page_ocr import HEADER, Generation


def forward_inputs(
    recipe: PageOcrRecipe,
    pages: list[Image.Image],
    instruction: str | None,
    task: str | None = None,
    *,
    max_new_tokens: int = 7,
) -> ForwardInputs:
    prompt = recipe.prompt_ids(recipe.prompt(instruction, "test", recipe.profile.task(task, "test")), "test")
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
