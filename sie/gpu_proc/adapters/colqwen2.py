"""ColQwen2.5 (Qwen2.5-VL + a projection): a page image or a text query -> one unit vector per token.

A page arrives as its resized uint8 pixels (sides multiples of 28) with its prompt's ids, a query as
its prompt's ids alone (sie.frontend.colqwen2). Pixels are normalized and cut into the processor's
flat patches here (14 x 14, each repeated over the two temporal frames, 2 x 2 merge groups
together), and run through `Qwen2_5_VLModel` with their grids and the image tokens marked, so the
decoder gets Qwen2.5-VL's 3D (M-RoPE) positions, as colpali-engine's ColQwen2_5 does. Last hidden
states go through the projection (`custom_text_proj`). Weights: sie.gpu_proc.adapters.colvision.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.colvision import PageModel, load_page_model
from sie.gpu_proc.adapters.common import compute_dtype, place
from sie.gpu_proc.adapters.qwen_patches import flat_patches
from sie.page_config import patch_pages

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

# colpali-engine's ColQwen2_5 names (a Qwen2_5_VLForConditionalGeneration when v0.2 was trained:
# `model.*` the decoder, `visual.*` the vision tower) -> Qwen2_5_VLModel's.
KEY_MAPPING = {
    r"^model\.language_model\.": "language_model.",
    r"^model\.visual\.": "visual.",
    r"^model\.": "language_model.",
}
PROJECTION = "custom_text_proj"


class ColQwen2Adapter(PageModel):
    def __init__(
        self,
        model: PreTrainedModel,
        projection: torch.nn.Linear,
        normalizer: PixelNormalizer,
        *,
        name: str,
        max_batch_tokens: int,
    ) -> None:
        super().__init__(model, projection, normalizer, name=name, max_batch_tokens=max_batch_tokens)
        vision = model.config.vision_config
        self._patch, self._merge = int(vision.patch_size), int(vision.spatial_merge_size)
        self._temporal = int(vision.temporal_patch_size)
        self._image_id = int(model.config.image_token_id)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ColQwen2Adapter:
        from transformers import Qwen2_5_VLModel  # deferred: importing transformers is slow

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        model, projection = load_page_model(
            Qwen2_5_VLModel, "qwen2_5_vl", weights_dir, KEY_MAPPING, PROJECTION, dtype
        )
        place(model, torch_device)
        patch_embed_as_matmul(model)
        normalizer = PixelNormalizer(patch_pages(weights_dir).pixels, torch_device)
        budget = config.profile(profile).max_batch_tokens
        return cls(model, projection, normalizer, name=config.sie_id, max_batch_tokens=budget)

    def _hidden(self, inputs: ForwardInputs, start: int, stop: int) -> torch.Tensor:
        ids = inputs.input_ids[start:stop]
        visual = {} if inputs.pixels is None else self._visual(inputs.pixels[start:stop], ids)
        mask = inputs.attention_mask[start:stop]
        output = self._live()(input_ids=ids, attention_mask=mask, use_cache=False, **visual)
        hidden: torch.Tensor = output.last_hidden_state
        return hidden

    def _visual(self, pixels: torch.Tensor, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The processor's flat patches of the pages [n, H, W, 3], their grids, the image tokens."""
        values = self._normalizer(pixels, torch.float32)  # [n, 3, H, W]
        n, _, height, width = values.shape
        rows, cols = height // self._patch, width // self._patch
        patches = flat_patches(values, self._patch, self._merge, self._temporal)
        return {
            "pixel_values": patches.to(self.dtype),
            "image_grid_thw": torch.tensor([[1, rows, cols]] * n, device=values.device),
            "mm_token_type_ids": (ids == self._image_id).int(),
        }


def patch_embed_as_matmul(model: torch.nn.Module) -> None:
    """The vision tower's patch embedding (a Conv3d whose kernel is its stride, over patches already
    cut) as the one matmul it is: cuDNN runs that conv patch by patch, the slowest step of a page on
    a GPU (as SIE found). Same weights; only the summation order differs."""
    embed = model.get_submodule("visual.patch_embed")
    weight = embed.proj.weight.reshape(embed.proj.out_channels, -1)  # a view: the loaded weights
    bias = embed.proj.bias

    def forward(patches: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(patches.reshape(-1, weight.shape[1]).to(weight.dtype), weight, bias)

    embed.forward = forward
