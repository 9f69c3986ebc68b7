"""LightOnOCR: transformers' `LightOnOcrForConditionalGeneration` (Pixtral's vision tower, a Qwen3
decoder) reading pages as the page OCR generator hands them over (sie.gpu_proc.adapters.page_ocr):
normalized and zero-padded to the part's largest, as the processor pads a batch, with their sizes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import load_model
from sie.gpu_proc.adapters.page_ocr import PageOcrGenerator
from sie.page_config import pixtral_pages
from sie.page_ocr import image_token_id

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class LightOnOcrAdapter(PageOcrGenerator):
    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> LightOnOcrAdapter:
        from transformers import LightOnOcrForConditionalGeneration  # deferred: slow to import

        model = load_model(LightOnOcrForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, pixtral_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)

    def page_inputs(self, inputs: ForwardInputs, part: range, ids: torch.Tensor) -> dict[str, Any]:
        pixels, sizes = self.pages(inputs, part)
        return {"pixel_values": pixels, "image_sizes": sizes}

    def pages(self, inputs: ForwardInputs, part: range) -> tuple[torch.Tensor, torch.Tensor]:
        """The part's pages normalized, zero-padded to the largest, and their (height, width)."""
        pages = [self.page(inputs, i) for i in part]
        sizes = [(page.shape[1], page.shape[2]) for page in pages]
        tallest, widest = max(h for h, _ in sizes), max(w for _, w in sizes)
        batch = torch.zeros((len(pages), 3, tallest, widest), dtype=torch.float32, device=self.device)
        for row, page in enumerate(pages):
            batch[row, :, : page.shape[1], : page.shape[2]] = page
        return batch.to(self.dtype), torch.tensor(sizes, dtype=torch.int64, device=self.device)
