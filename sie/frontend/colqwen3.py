"""ColQwen3's prompts and page sizes (TomoroAI's retriever on Qwen3-VL), as its processor builds them
(no torch).

A text: the folder's query prefix (none unless processor_config.json gives one), the text without
its edge whitespace, then ten "<|endoftext|>" (the query augmentation colpali-engine trains with). A
page: "<|im_start|>user\\n<|vision_start|>", one "<|image_pad|>" per visual token (2 x 2 merged
16-px patches), then "<|vision_end|>Describe the image.<|im_end|><|endoftext|>"; the pixels resized
by Qwen2-VL's `smart_resize` between the folder's least pixel count and the profile's
`max_num_visual_tokens` (1,280 unless the profile says otherwise; SIE's `compact` profile: 768).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sie.frontend.colqwen2 import IMAGE_TOKEN, QUERY_SUFFIX, ColQwen2Recipe
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.frontend.tasks.pages import embed_pages, encode_prompts, split_prompt
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.frontend.wire import Item
from sie.model_location import resolve_weights_dir
from sie.page_config import GridPages, PageConfigError, qwen_pages

VISUAL_PREFIX = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image."
VISUAL_SUFFIX = "<|im_end|><|endoftext|>"
DEFAULT_VISUAL_TOKENS = 1280  # the processor's own cap on a page's visual tokens


def capped_pages(folder: Path, visual_tokens: Any) -> GridPages:
    """The folder's page rule with the processor's cap: at most `visual_tokens` merged patches."""
    if isinstance(visual_tokens, bool) or not isinstance(visual_tokens, int) or visual_tokens <= 0:
        raise PageConfigError(f"max_num_visual_tokens {visual_tokens!r} is not a positive integer")
    pages = qwen_pages(folder)
    most = visual_tokens * pages.factor**2
    if most < pages.min_pixels:
        raise PageConfigError(
            f"{folder}: max_num_visual_tokens {visual_tokens} allows fewer pixels ({most}) than the "
            f"image processor's least ({pages.min_pixels})"
        )
    return dataclasses.replace(pages, max_pixels=most)


@dataclass(frozen=True, slots=True)
class ColQwen3Recipe(ColQwen2Recipe):
    """ColQwen2.5's pages and prompt layout (sie.frontend.colqwen2) with ColQwen3's cap, prompts and
    text handling."""

    query_prefix: str = ""

    @classmethod
    def for_model(
        cls, tokenizer: TextTokenizer, folder: Path, visual_tokens: Any = DEFAULT_VISUAL_TOKENS
    ) -> ColQwen3Recipe:
        prompts = _processor_prompts(folder)
        page_prompt = prompts.get("visual_prompt_prefix", VISUAL_PREFIX) + prompts.get(
            "visual_prompt_suffix", VISUAL_SUFFIX
        )
        head, tail, image_id = split_prompt(tokenizer.raw, page_prompt, IMAGE_TOKEN)
        pages = capped_pages(folder, visual_tokens)
        return cls(tokenizer.raw, head, tail, image_id, pages, prompts.get("query_prefix", ""))

    def queries(self, texts: Sequence[str]) -> Encoded:
        prompts = [f"{self.query_prefix}{text.strip()}{QUERY_SUFFIX}" for text in texts]
        return encode_prompts(self.tokenizer, prompts, add_special_tokens=True)


def _processor_prompts(folder: Path) -> dict[str, str]:
    """The prompt pieces processor_config.json sets (the processor's constructor arguments)."""
    path = folder / "processor_config.json"
    raw = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    keys = ("query_prefix", "visual_prompt_prefix", "visual_prompt_suffix")
    return {key: raw[key] for key in keys if isinstance(raw, dict) and isinstance(raw.get(key), str)}


async def embed(
    state: FrontendState, target: Target, items: Sequence[Item], texts: list[str], options: EmbedOptions
) -> Embedded:
    """The family's encode runner (sie.families.colqwen3): pages at the request profile's cap."""
    config = target.config
    cap = target.profile.adapter_options.loadtime.get("max_num_visual_tokens", DEFAULT_VISUAL_TOKENS)
    recipe = state.tokenizers.derived(  # a bad cap or folder: the model fails to load (502)
        config,
        f"colqwen3:{cap!r}",
        lambda tokenizer: ColQwen3Recipe.for_model(tokenizer, resolve_weights_dir(config), cap),
    )
    return await embed_pages(state, target, items, texts, options, recipe)
