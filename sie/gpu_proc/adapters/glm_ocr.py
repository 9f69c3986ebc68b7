"""GLM-OCR: transformers' `GlmOcrForConditionalGeneration` (a CogViT vision tower, a GLM decoder
with 3D rotary positions) reading pages on Qwen2-VL's grid (sie.gpu_proc.adapters.page_ocr)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sie.gpu_proc.adapters.common import load_model
from sie.gpu_proc.adapters.page_ocr import GridPageGenerator
from sie.page_config import glm_pages
from sie.page_ocr import image_token_id

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class GlmOcrAdapter(GridPageGenerator):
    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GlmOcrAdapter:
        from transformers import GlmOcrForConditionalGeneration  # deferred: slow to import

        model = load_model(GlmOcrForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, glm_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)
