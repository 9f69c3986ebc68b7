"""What the page OCR models (LightOnOCR-2 and -3, GLM-OCR, PaddleOCR-VL, MinerU2.5) share on the
device: pages in, generated ids out.

The frontend (sie.frontend.tasks.page_ocr) sends each item's generation header, then its prompt with
the image token already expanded, `aux` holding the page's width in pixels on those tokens, and the
resized page's RGB bytes in the sample section. Here the prompts are left-padded, each architecture
turns its pages into what its model reads (`page_inputs`), and `generate` decodes greedily or
samples, as the header says, a few pages at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, generated_tokens, without_padding
from sie.gpu_proc.adapters.qwen_patches import flat_patches
from sie.gpu_proc.outputs import Output
from sie.page_ocr import HEADER, Generation
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.page_config import GridPages, PageLayout

MAX_PAGES_PER_GENERATE = 4  # a large batch is generated in parts, so caches stay bounded (as SIE)
IMAGE_TOKEN_TYPE = 1  # mm_token_type_ids: text 0, image 1, video 2


class PageOcrGenerator(HeldModel):
    kinds = frozenset({ResultKind.TOKENS})
    no_repeat_ngram: int | None = None  # the family's (sie.page_ocr.OcrFamily)

    def __init__(self, model: PreTrainedModel, pages: PageLayout, image_token: int, *, name: str) -> None:
        super().__init__(model, name=name)
        text = model.config.get_text_config()
        pad = getattr(text, "pad_token_id", None)
        if pad is None:
            pad = model.generation_config.pad_token_id
        eos = model.generation_config.eos_token_id
        eos = eos[0] if isinstance(eos, list) else eos
        self.pad_token_id = int(pad if pad is not None else (eos if eos is not None else 0))
        self.image_token = image_token
        self.layout = pages
        self.normalizer = PixelNormalizer(pages.pixels, self.device)

    def lora_target(self) -> torch.nn.Module | None:
        return None  # these families take no LoRA adapters

    def page_inputs(self, inputs: ForwardInputs, part: range, ids: torch.Tensor) -> dict[str, Any]:
        """The model's image arguments for the part's pages (`ids`: the part's left-padded prompts)."""
        raise NotImplementedError

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model: Any = self._live()
        if inputs.samples is None or inputs.aux is None:
            raise ValueError("page OCR items need their page bytes and its width in aux")
        generation = Generation.from_header(inputs.input_ids[0, :HEADER].tolist())
        decoding: dict[str, Any] = {"do_sample": False}
        if generation.temperature > 0:
            decoding = {"do_sample": True, "temperature": generation.temperature, "top_p": generation.top_p}
        if self.no_repeat_ngram:
            decoding["no_repeat_ngram_size"] = self.no_repeat_ngram
        rows: list[list[int]] = []
        for start in range(0, len(inputs.lengths), MAX_PAGES_PER_GENERATE):
            part = range(start, min(start + MAX_PAGES_PER_GENERATE, len(inputs.lengths)))
            ids, mask = self._left_padded(inputs, part)
            images = self.page_inputs(inputs, part, ids)
            with torch.inference_mode():
                generated = model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    **images,
                    **decoding,
                    max_new_tokens=generation.max_new_tokens,
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

    def page(self, inputs: ForwardInputs, i: int) -> torch.Tensor:
        """Item i's page normalized, [3, H, W] float32, checked against its image tokens."""
        assert inputs.samples is not None and inputs.aux is not None
        length = inputs.lengths[i]  # the header is a number, not a token: it may equal the image token
        is_image = inputs.input_ids[i, HEADER:length] == self.image_token
        tokens = int(is_image.sum())
        width = int(inputs.aux[i, HEADER:length][is_image][0]) if tokens else 0
        data = inputs.samples[i].contiguous().view(torch.uint8)
        height = len(data) // (3 * width) if width > 0 else 0
        fits = len(data) - height * width * 3 < 4 and self.layout.image_tokens(height, width) == tokens
        if not tokens or not fits:
            raise ValueError(f"{len(data)} page bytes, {width} wide, do not fit {tokens} image tokens")
        pixels = data[: height * width * 3].to(self.device).view(height, width, 3)
        return self.normalizer(pixels.unsqueeze(0), torch.float32)[0]


class GridPageGenerator(PageOcrGenerator):
    """Pages on Qwen2-VL's grid (LightOnOCR-3, GLM-OCR, PaddleOCR-VL, MinerU2.5): each cut into
    patches, with its (1, rows, columns) patch grid and the token types that mark the image tokens,
    from which the model places its 3D rotary positions."""

    layout: GridPages

    def cut(self, page: torch.Tensor) -> torch.Tensor:
        """A normalized page [3, H, W] as the rows of patches its model reads: Qwen2-VL's flat
        patches, the still page repeated over the tower's temporal patch."""
        grid = self.layout
        return flat_patches(page.unsqueeze(0), grid.patch_size, grid.merge_size, grid.temporal_patch)

    def page_inputs(self, inputs: ForwardInputs, part: range, ids: torch.Tensor) -> dict[str, Any]:
        pixels, grids = self.patches(inputs, part)
        types = (ids == self.image_token).to(torch.int32) * IMAGE_TOKEN_TYPE
        return {"pixel_values": pixels, "image_grid_thw": grids, "mm_token_type_ids": types}

    def patches(self, inputs: ForwardInputs, part: range) -> tuple[torch.Tensor, torch.Tensor]:
        """The part's pages as one run of patches, and each page's (1, rows, columns) grid."""
        p, factor = self.layout.patch_size, self.layout.factor
        patches, grids = [], []
        for i in part:
            page = self.page(inputs, i)
            height, width = page.shape[1:]
            if height % factor or width % factor:
                raise ValueError(f"a {width}x{height} page is not in whole {factor}-pixel tokens")
            patches.append(self.cut(page))
            grids.append((1, height // p, width // p))
        grid = torch.tensor(grids, dtype=torch.int64, device=self.device)
        return torch.cat(patches).to(self.dtype), grid
