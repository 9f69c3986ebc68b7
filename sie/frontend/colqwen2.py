"""ColQwen2.5's prompts and page processing, as SIE's adapter builds them (no torch).

A query: the text, then ten "<|endoftext|>" (colpali-engine's query augmentation), no prefix,
tokenized as the processor's tokenizer does. A page: "<|im_start|>user\\n<|vision_start|>", one
"<|image_pad|>" per visual token (2 x 2 merged patches of 14 px), then "<|vision_end|>Describe the
image.<|im_end|><|endoftext|>"; its pixels resized by Qwen2-VL's `smart_resize` to between 256 and
768 visual tokens (sie.page_config). Each page keeps its own size; the device patchifies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InvalidInput
from sie.frontend.media.images import resize_pixels
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.frontend.tasks.pages import Page, embed_pages, encode_prompts, split_prompt
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.frontend.wire import Item
from sie.model_location import resolve_weights_dir
from sie.page_config import GridPages, patch_pages

VISUAL_PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|><|endoftext|>"
)
IMAGE_TOKEN = "<|image_pad|>"
QUERY_SUFFIX = "<|endoftext|>" * 10  # buffers the query reasons in (query augmentation)


@dataclass(frozen=True, slots=True)
class ColQwen2Recipe:
    tokenizer: Tokenizer  # the model's, truncating at its max length
    head: np.ndarray  # int32 prompt ids before the visual tokens
    tail: np.ndarray  # and after them
    image_id: int
    pages: GridPages
    one_size: ClassVar[bool] = False  # each page keeps its aspect

    @classmethod
    def for_model(cls, tokenizer: TextTokenizer, folder: Path) -> ColQwen2Recipe:
        head, tail, image_id = split_prompt(tokenizer.raw, VISUAL_PROMPT, IMAGE_TOKEN)
        return cls(tokenizer.raw, head, tail, image_id, patch_pages(folder))

    def queries(self, texts: Sequence[str]) -> Encoded:
        prompts = [f"{text}{QUERY_SUFFIX}" for text in texts]
        return encode_prompts(self.tokenizer, prompts, add_special_tokens=True)

    def page(self, pixels: np.ndarray, where: str) -> Page:
        try:
            height, width = self.pages.resized(*pixels.shape[:2])
        except ValueError as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        resized = resize_pixels(pixels, width, height, self.pages.pixels.resample)
        visual = np.full(self.pages.image_tokens(height, width), self.image_id, np.int32)
        return Page(resized, np.concatenate([self.head, visual, self.tail]))

    def unit_bytes(self) -> int:
        area = self.pages.largest_area
        return area * 3 + 4 * (len(self.head) + len(self.tail) + self.pages.most_image_tokens)


async def embed(
    state: FrontendState, target: Target, items: Sequence[Item], texts: list[str], options: EmbedOptions
) -> Embedded:
    """The family's encode runner (sie.families.colqwen2)."""
    config = target.config
    recipe = state.tokenizers.derived(
        config, "colqwen2", lambda tokenizer: ColQwen2Recipe.for_model(tokenizer, resolve_weights_dir(config))
    )
    return await embed_pages(state, target, items, texts, options, recipe)
