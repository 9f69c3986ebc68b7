"""LightOnOCR: a page and its prompt -> generated token ids (the frontend decodes them).

transformers' `LightOnOcrForConditionalGeneration` (Pixtral's vision tower, a Qwen3 decoder). The
frontend (sie.frontend.tasks.lighton_ocr) sends each item's generation header, then its prompt with
the image token already expanded, `aux` holding the page's width in pixels on those tokens, and the
resized page's RGB bytes in the sample section. Here the pages are normalized and zero-padded to the
batch's largest, as the processor pads a batch, the prompts are left-padded, and `generate` decodes
greedily.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, generated_tokens, load_model, without_padding
from sie.gpu_proc.outputs import Output
from sie.lighton_ocr import HEADER, image_token_id
from sie.page_config import PixtralPages, pixtral_pages
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

MAX_PAGES_PER_GENERATE = 4  # a large batch is generated in parts, so caches stay bounded (as SIE)


class LightOnOcrAdapter(HeldModel):
    kinds = frozenset({ResultKind.TOKENS})

    def __init__(self, model: PreTrainedModel, pages: PixtralPages, image_token: int, *, name: str) -> None:
        super().__init__(model, name=name)
        text = model.config.get_text_config()
        pad = getattr(text, "pad_token_id", None)
        eos = model.generation_config.eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        self.pad_token_id = int(pad if pad is not None else (eos if eos is not None else 0))
        self._token_edge = pages.token_edge
        self._image_token = image_token
        self._normalizer = PixelNormalizer(pages.pixels, self.device)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> LightOnOcrAdapter:
        from transformers import LightOnOcrForConditionalGeneration  # deferred: slow to import

        model = load_model(LightOnOcrForConditionalGeneration, config, weights_dir, device, profile)
        return cls(model, pixtral_pages(weights_dir), image_token_id(weights_dir), name=config.sie_id)

    def lora_target(self) -> torch.nn.Module | None:
        return None  # the family takes no LoRA adapters

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model: Any = self._live()
        if inputs.samples is None or inputs.aux is None:
            raise ValueError("LightOnOCR items need their page bytes and its width in aux")
        max_new_tokens = int(inputs.input_ids[0, 0])
        rows: list[list[int]] = []
        for start in range(0, len(inputs.lengths), MAX_PAGES_PER_GENERATE):
            part = range(start, min(start + MAX_PAGES_PER_GENERATE, len(inputs.lengths)))
            ids, mask = self._left_padded(inputs, part)
            pixels, sizes = self._pages(inputs, part)
            with torch.inference_mode():
                generated = model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    pixel_values=pixels,
                    image_sizes=sizes,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    num_beams=1,
                    pad_token_id=self.pad_token_id,
                )
            rows.extend(
                without_padding(row, self.pad_token_id) for row in generated[:, ids.shape[1] :].tolist()
            )
        return {ResultKind.TOKENS: generated_tokens(rows)}

    def _left_padded(self, inputs: ForwardInputs, part: range) -> tuple[torch.Tensor, torch.Tensor]:
        """The part's prompts (header dropped) flush right, as batched generation wants them."""
        lengths = [inputs.lengths[i] - HEADER for i in part]
        width = max(lengths)
        ids = torch.full((len(part), width), self.pad_token_id, dtype=torch.int64, device=self.device)
        mask = torch.zeros((len(part), width), dtype=torch.int64, device=self.device)
        for row, (i, length) in enumerate(zip(part, lengths, strict=True)):
            ids[row, width - length :] = inputs.input_ids[i, HEADER : HEADER + length]
            mask[row, width - length :] = 1
        return ids, mask

    def _pages(self, inputs: ForwardInputs, part: range) -> tuple[torch.Tensor, torch.Tensor]:
        """The part's pages normalized, zero-padded to the largest, and their (height, width)."""
        assert inputs.samples is not None and inputs.aux is not None
        edge, pages, sizes = self._token_edge, [], []
        for i in part:
            length = inputs.lengths[i]
            is_image = inputs.input_ids[i, :length] == self._image_token
            tokens = int(is_image.sum())
            width = int(inputs.aux[i, :length][is_image][0]) if tokens else 0
            data = inputs.samples[i].contiguous().view(torch.uint8)
            height = len(data) // (3 * width) if width > 0 else 0
            fits = len(data) - height * width * 3 < 4 and (height // edge) * (width // edge) == tokens
            if not tokens or not fits:
                raise ValueError(f"{len(data)} page bytes, {width} wide, do not fit {tokens} image tokens")
            pixels = data[: height * width * 3].to(self.device).view(height, width, 3)
            pages.append(self._normalizer(pixels.unsqueeze(0), torch.float32)[0])
            sizes.append((height, width))
        tallest, widest = max(h for h, _ in sizes), max(w for _, w in sizes)
        batch = torch.zeros((len(pages), 3, tallest, widest), dtype=torch.float32, device=self.device)
        for row, page in enumerate(pages):
            batch[row, :, : page.shape[1], : page.shape[2]] = page
        return batch.to(self.dtype), torch.tensor(sizes, dtype=torch.int64, device=self.device)
