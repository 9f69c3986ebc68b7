"""GLM-OCR: transformers' `GlmOcrForConditionalGeneration` (a CogViT vision tower, a GLM decoder
with 3D rotary positions) reading pages as the page OCR generator hands them over
(sie.gpu_proc.adapters.page_ocr): each page normalized and cut into Qwen2-VL's flat patches (a still
page repeated over the tower's temporal patch), its (1, rows, columns) patch grid, and the token
types that mark the image tokens, from which the model places its 3D positions.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import load_model
from sie.gpu_proc.adapters.page_ocr import PageOcrGenerator
from sie.gpu_proc.adapters.qwen_patches import flat_patches
from sie.page_config import GlmPages, glm_pages
from sie.page_ocr import image_token_id

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

IMAGE_TOKEN_TYPE = 1  # mm_token_type_ids: text 0, image 1, video 2


class GlmOcrAdapter(PageOcrGenerator):
    def __init__(self, model: PreTrainedModel, pages: GlmPages, image_token: int, *, name: str) -> None:
        super().__init__(model, pages, image_token, name=name)
        self._pages = pages

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GlmOcrAdapter:
        from transformers import GlmOcrForConditionalGeneration  # deferred: slow to import

        model = load_model(GlmOcrForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, glm_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)

    def page_inputs(self, inputs: ForwardInputs, part: range, ids: torch.Tensor) -> dict[str, Any]:
        pixels, grids = self.patches(inputs, part)
        types = (ids == self.image_token).to(torch.int32) * IMAGE_TOKEN_TYPE
        return {"pixel_values": pixels, "image_grid_thw": grids, "mm_token_type_ids": types}

    def patches(self, inputs: ForwardInputs, part: range) -> tuple[torch.Tensor, torch.Tensor]:
        """The part's pages as one run of flat patches, and each page's (1, rows, columns) grid."""
        spec = self._pages
        patches, grids = [], []
        for i in part:
            page = self.page(inputs, i)
            if page.shape[1] % spec.factor or page.shape[2] % spec.factor:
                raise ValueError(
                    f"a {page.shape[2]}x{page.shape[1]} page is not in whole {spec.factor}-pixel tokens"
                )
            rows, columns = page.shape[1] // spec.patch_size, page.shape[2] // spec.patch_size
            patches.append(flat_patches(page.unsqueeze(0), spec.patch_size, spec.merge_size, spec.frames))
            grids.append((1, rows, columns))
        grid = torch.tensor(grids, dtype=torch.int64, device=self.device)
        return torch.cat(patches).to(self.dtype), grid
