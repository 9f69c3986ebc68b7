"""PaddleOCR-VL: transformers' `PaddleOCRVLForConditionalGeneration` (a NaViT SigLIP vision tower, an
ERNIE-4.5 decoder with 3D rotary positions) reading pages on Qwen2-VL's grid
(sie.gpu_proc.adapters.page_ocr): each page cut into [3, p, p] patches row by row, as
PaddleOCRVLImageProcessor cuts them.

The Hub checkpoint's remote-code layout loads into this class through transformers' own weight
renaming; no remote code runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.common import load_model
from sie.gpu_proc.adapters.page_ocr import GridPageGenerator
from sie.page_config import paddle_pages
from sie.page_ocr import image_token_id

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class PaddleOcrVlAdapter(GridPageGenerator):
    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> PaddleOcrVlAdapter:
        from transformers import PaddleOCRVLForConditionalGeneration  # deferred: slow to import

        model = load_model(PaddleOCRVLForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, paddle_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)

    def cut(self, page: torch.Tensor) -> torch.Tensor:
        p = self.layout.patch_size
        channels, height, width = page.shape
        rows, columns = height // p, width // p
        cut = page.reshape(channels, rows, p, columns, p).permute(1, 3, 0, 2, 4)
        return cut.reshape(rows * columns, channels, p, p)
