"""ColSmol (SmolVLM, an Idefics3, + a projection): a page image or a text query -> one unit vector
per token.

A page arrives as its frames stacked top to bottom ([frames x tile, tile, 3] uint8: its tiles row by
row, then its global view) with its prompt's ids, a query as its prompt's ids alone
(sie.frontend.colsmol). The frames are normalized and run through `Idefics3Model` as the page's
images (every frame a whole tile, so no pixel mask); last hidden states go through the projection
(`linear`), as colpali-engine's ColIdefics3 does. Weights: sie.gpu_proc.adapters.colvision.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.colvision import PageModel, load_page_model
from sie.gpu_proc.adapters.common import compute_dtype, place
from sie.page_config import tiled_pages

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

# colpali-engine's ColIdefics3 holds the Idefics3Model as `model` beside its projection `linear`.
KEY_MAPPING = {r"^model\.": ""}
PROJECTION = "linear"


class ColSmolAdapter(PageModel):
    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ColSmolAdapter:
        from transformers import Idefics3Model  # deferred: importing transformers is slow

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        model, projection = load_page_model(
            Idefics3Model, "idefics3", weights_dir, KEY_MAPPING, PROJECTION, dtype
        )
        place(model, torch_device)
        normalizer = PixelNormalizer(tiled_pages(weights_dir).pixels, torch_device)
        budget = config.profile(profile).max_batch_tokens
        return cls(model, projection, normalizer, name=config.sie_id, max_batch_tokens=budget)

    def _hidden(self, inputs: ForwardInputs, start: int, stop: int) -> torch.Tensor:
        ids = inputs.input_ids[start:stop]
        images = {}
        if inputs.pixels is not None:
            pages = inputs.pixels[start:stop]
            n, height, tile = pages.shape[:3]
            frames = self._normalizer(pages.reshape(n * (height // tile), tile, tile, 3), self.dtype)
            images["pixel_values"] = frames.view(n, height // tile, 3, tile, tile)
        mask = inputs.attention_mask[start:stop]
        output = self._live()(input_ids=ids, attention_mask=mask, use_cache=False, **images)
        hidden: torch.Tensor = output.last_hidden_state
        return hidden
