"""ColPali's prompts and page processing, as `ColPaliProcessor` builds them (no torch).

A query: "<bos>" + query_prefix ("Question: ") + text + ten pad tokens + "\\n", with no other
special tokens. A page: `image_seq_length` image placeholders, then "<bos>" + visual_prompt_prefix
("Describe the image.") + "\\n"; its pixels resized to the model's square (SigLIP's processor).
The prefixes come from the folder's processor_config.json, the special tokens from its
tokenizer_config.json, the placeholder count from its preprocessor config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tokenizers import Tokenizer

from sie.frontend.media.images import preprocess
from sie.frontend.model_files import read_json_object
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.frontend.tasks.pages import Page, embed_pages, encode_prompts
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.frontend.wire import Item
from sie.media_config import ImageSpec, image_spec, read_preprocessor_config
from sie.model_location import resolve_weights_dir

QUERY_PREFIX = "Question: "
VISUAL_PROMPT_PREFIX = "Describe the image."
QUERY_AUGMENTATION = 10  # pad tokens after a query: buffers the model reasons in


@dataclass(frozen=True, slots=True)
class ColPaliRecipe:
    tokenizer: Tokenizer  # the model's, truncating at its max length
    query_head: str
    query_tail: str
    image_ids: np.ndarray  # int32: placeholders, then the visual prompt
    spec: ImageSpec
    one_size: ClassVar[bool] = True  # the model's square

    @classmethod
    def for_model(cls, tokenizer: TextTokenizer, folder: Path) -> ColPaliRecipe:
        raw = tokenizer.raw
        processor = read_json_object(folder / "processor_config.json")
        special = read_json_object(folder / "tokenizer_config.json")
        bos, pad = _token(special, "bos_token", "<bos>"), _token(special, "pad_token", "<pad>")
        image_token = _token(special, "image_token", "<image>")
        image_id = raw.token_to_id(image_token)
        if image_id is None:
            raise ValueError(f"{folder}: the tokenizer has no image token {image_token!r}")
        visual = f"{bos}{processor.get('visual_prompt_prefix', VISUAL_PROMPT_PREFIX)}\n"
        prompt = raw.encode(visual, add_special_tokens=False).ids
        placeholders = [image_id] * _image_seq_length(folder, processor)
        return cls(
            tokenizer=raw,
            query_head=f"{bos}{processor.get('query_prefix', QUERY_PREFIX)}",
            query_tail=f"{pad * QUERY_AUGMENTATION}\n",
            image_ids=np.asarray(placeholders + prompt, np.int32),
            spec=image_spec(folder, "colpali"),
        )

    def queries(self, texts: Sequence[str]) -> Encoded:
        prompts = [f"{self.query_head}{text}{self.query_tail}" for text in texts]
        return encode_prompts(self.tokenizer, prompts, add_special_tokens=False)

    def page(self, pixels: np.ndarray, where: str = "") -> Page:  # a fixed resize cannot fail
        return Page(preprocess(pixels, self.spec), self.image_ids)

    def unit_bytes(self) -> int:
        return self.spec.height * self.spec.width * 3 + 4 * len(self.image_ids)


async def embed(
    state: FrontendState, target: Target, items: Sequence[Item], texts: list[str], options: EmbedOptions
) -> Embedded:
    """The family's encode runner (sie.families.colpali)."""
    config = target.config
    recipe = state.tokenizers.derived(
        config, "colpali", lambda tokenizer: ColPaliRecipe.for_model(tokenizer, resolve_weights_dir(config))
    )
    return await embed_pages(state, target, items, texts, options, recipe)


def _token(special: dict[str, Any], key: str, default: str) -> str:
    value = special.get(key, default)
    if isinstance(value, dict):  # an AddedToken saved with its flags
        value = value.get("content", default)
    return str(value) if value else default


def _image_seq_length(folder: Path, processor: dict[str, Any]) -> int:
    """Image placeholders per page: the preprocessor's `image_seq_length` (one per vision patch)."""
    nested = processor.get("image_processor")
    for source in (read_preprocessor_config(folder), nested if isinstance(nested, dict) else {}):
        if isinstance(source.get("image_seq_length"), int):
            return int(source["image_seq_length"])
    raise ValueError(f"{folder}: no image_seq_length in the preprocessor config")
