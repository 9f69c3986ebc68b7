"""ColSmol's prompts and page processing, as SIE's adapter builds them (no torch).

A query: the text, then ten "<end_of_utterance>" (colpali-engine's query augmentation), tokenized
as the processor's tokenizer does. A page: "<|im_start|>User:", its image placeholders, then
"Describe the image.<end_of_utterance>\\nAssistant:". Idefics3's processor writes the placeholders
per tile, row by row ("<fake_token_around_image><row_r_col_c>" and `image_seq_len` "<image>", a
newline after each row), then the global view's ("\\n<fake_token_around_image><global-img>", the
"<image>"s, "<fake_token_around_image>"); an unsplit page has only the global view's. The pixels:
the page resized and cut into tiles as Idefics3's image processor does (sie.page_config), the tiles
then the global view stacked top to bottom, one tile wide.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tokenizers import Tokenizer

from sie.frontend.media.images import resize_pixels
from sie.frontend.model_files import read_json_object
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.frontend.tasks.pages import Page, embed_pages, encode_prompts, split_prompt
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.frontend.wire import Item
from sie.model_location import resolve_weights_dir
from sie.page_config import TiledPages, tiled_pages

VISUAL_PROMPT = "<|im_start|>User:<image>Describe the image.<end_of_utterance>\nAssistant:"
IMAGE_TOKEN, FAKE_TOKEN, GLOBAL_TOKEN = "<image>", "<fake_token_around_image>", "<global-img>"
QUERY_SUFFIX = "<end_of_utterance>" * 10  # buffers the query reasons in (query augmentation)


@dataclass(frozen=True, slots=True)
class ColSmolRecipe:
    tokenizer: Tokenizer  # the model's, truncating at its max length (queries)
    whole: Tokenizer  # the same, never truncating (a page's placeholders)
    head: np.ndarray  # int32 prompt ids before the placeholders
    tail: np.ndarray  # and after them
    image_seq_len: int  # "<image>" tokens of one tile
    pages: TiledPages
    _placeholders: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # by (rows, cols)
    one_size: ClassVar[bool] = False  # as many tiles as the page needs

    @classmethod
    def for_model(cls, tokenizer: TextTokenizer, folder: Path) -> ColSmolRecipe:
        whole = Tokenizer.from_str(tokenizer.raw.to_str())
        whole.no_truncation()
        head, tail, _ = split_prompt(whole, VISUAL_PROMPT, IMAGE_TOKEN)
        return cls(tokenizer.raw, whole, head, tail, image_seq_len(folder), tiled_pages(folder))

    def queries(self, texts: Sequence[str]) -> Encoded:
        prompts = [f"{text}{QUERY_SUFFIX}" for text in texts]
        return encode_prompts(self.tokenizer, prompts, add_special_tokens=True)

    def page(self, pixels: np.ndarray, where: str) -> Page:
        frames, rows, cols = tiles(pixels, self.pages)
        ids = np.concatenate([self.head, self.placeholders(rows, cols), self.tail])
        return Page(np.concatenate(frames), ids)

    def placeholders(self, rows: int, cols: int) -> np.ndarray:
        """The ids of a page's image placeholders (one tokenization per tile grid)."""
        found = self._placeholders.get((rows, cols))
        if found is None:
            text = placeholder_text(rows, cols, self.image_seq_len)
            found = np.asarray(self.whole.encode(text, add_special_tokens=False).ids, np.int32)
            self._placeholders[(rows, cols)] = found  # a race only tokenizes twice
        return found

    def unit_bytes(self) -> int:
        n_tiles, tile = self.pages.max_tiles(), self.pages.tile
        ids = len(self.head) + len(self.tail) + n_tiles * (self.image_seq_len + 4)
        return n_tiles * tile * tile * 3 + 4 * ids


def tiles(pixels: np.ndarray, pages: TiledPages) -> tuple[list[np.ndarray], int, int]:
    """Idefics3's frames of a page, each [tile, tile, 3] uint8: the tiles row by row, then the global
    view (an unsplit page: one frame); and the tile grid's rows and columns (0, 0 unsplit)."""
    tile, resample = pages.tile, pages.resample
    height, width = pages.first_size(*pixels.shape[:2])
    image = resize_pixels(pixels, width, height, resample)
    if not pages.split:
        return [resize_pixels(image, tile, tile, resample)], 0, 0
    height, width = pages.tiled_size(height, width)
    image = resize_pixels(image, width, height, resample)
    if height <= tile and width <= tile:
        return [image], 0, 0
    rows, cols = height // tile, width // tile
    frames = [
        image[r * tile : (r + 1) * tile, c * tile : (c + 1) * tile] for r in range(rows) for c in range(cols)
    ]
    frames.append(resize_pixels(image, tile, tile, resample))
    return frames, rows, cols


def placeholder_text(rows: int, cols: int, image_seq_len: int) -> str:
    """What Idefics3's processor puts in place of a page's "<image>"."""
    images = IMAGE_TOKEN * image_seq_len
    global_view = f"{FAKE_TOKEN}{GLOBAL_TOKEN}{images}{FAKE_TOKEN}"
    if rows == 0 and cols == 0:
        return global_view
    grid = "".join(
        "".join(f"{FAKE_TOKEN}<row_{r + 1}_col_{c + 1}>{images}" for c in range(cols)) + "\n"
        for r in range(rows)
    )
    return f"{grid}\n{global_view}"


def image_seq_len(folder: Path) -> int:
    """Image tokens of a tile: the processor's `image_seq_len`, else what the model config implies."""
    saved = read_json_object(folder / "processor_config.json").get("image_seq_len")
    if isinstance(saved, int):
        return saved
    config: dict[str, Any] = read_json_object(folder / "config.json")
    vision, scale = config.get("vision_config") or {}, config.get("scale_factor")
    if (
        isinstance(vision, dict)
        and isinstance(scale, int)
        and vision.get("image_size")
        and vision.get("patch_size")
    ):
        return (int(vision["image_size"]) // int(vision["patch_size"])) ** 2 // scale**2
    raise ValueError(f"{folder}: no image_seq_len in processor_config.json, nor a config.json implying it")


async def embed(
    state: FrontendState, target: Target, items: Sequence[Item], texts: list[str], options: EmbedOptions
) -> Embedded:
    """The family's encode runner (sie.families.colsmol)."""
    config = target.config
    recipe = state.tokenizers.derived(
        config, "colsmol", lambda tokenizer: ColSmolRecipe.for_model(tokenizer, resolve_weights_dir(config))
    )
    return await embed_pages(state, target, items, texts, options, recipe)
