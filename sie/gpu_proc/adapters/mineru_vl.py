"""MinerU2.5: transformers' `Qwen2VLForConditionalGeneration` (a Qwen2-VL vision tower and Qwen2
decoder) reading pages on Qwen2-VL's grid (sie.gpu_proc.adapters.page_ocr), greedy, never repeating
100 tokens verbatim (MinerU's own guard against runaway loops)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sie.gpu_proc.adapters.common import load_model
from sie.gpu_proc.adapters.page_ocr import GridPageGenerator
from sie.page_config import qwen_pages
from sie.page_ocr import MINERU_VL, image_token_id

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class MinerUVlAdapter(GridPageGenerator):
    no_repeat_ngram = MINERU_VL.no_repeat_ngram

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> MinerUVlAdapter:
        from transformers import Qwen2VLForConditionalGeneration  # deferred: slow to import

        model = load_model(Qwen2VLForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, qwen_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)
