"""LightOnOCR-3: transformers' `Qwen3_5ForConditionalGeneration` (Qwen3.5: a vision tower and a
hybrid Gated DeltaNet and attention decoder with 3D rotary positions) reading pages on Qwen2-VL's
grid (sie.gpu_proc.adapters.page_ocr), transcribing by sampling as the profile says."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sie.gpu_proc.adapters.common import load_model
from sie.gpu_proc.adapters.page_ocr import GridPageGenerator
from sie.page_config import qwen_pages
from sie.page_ocr import image_token_id

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class LightOnOcr3Adapter(GridPageGenerator):
    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> LightOnOcr3Adapter:
        from transformers import Qwen3_5ForConditionalGeneration  # deferred: slow to import

        model = load_model(Qwen3_5ForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, qwen_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)
