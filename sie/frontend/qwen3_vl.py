"""Qwen3-VL prompts as device items (no torch): tokenized, their images resized (sie.qwen3_vl).

A `Row` is one prompt the model reads: an embedding item, or a reranker's (query, item) pair. Its
prompt holds one `<|vision_start|><|image_pad|><|vision_end|>` per image and is tokenized whole,
as the processor tokenizes it; each image's one `<|image_pad|>` then becomes one per merged patch
of its resized grid, as the processor expands it. The special tokens bound the text between
them, so expanding after tokenizing gives the processor's ids.

A prompt over the limit loses tokens of its item's text (an embedding item's text, a pair's
document) from the end, as SIE's reranker trims its documents: the template, the instruction and
the images are never cut, and a prompt they alone make too long is a 400.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from sie import qwen3_vl as recipe
from sie.errors import InvalidInput
from sie.frontend.media.images import decode_image, resize_pixels, resized_size
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.images import ImageUnit
from sie.model_config import ModelConfig
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir

DEFAULT_LIMIT = 32768  # tokens of one prompt when the YAML sets no max_sequence_length

# An image still to decode, or pixels already resized (a reranker's query image, shared by pairs).
Picture = ImageUnit | np.ndarray


@dataclass(frozen=True, slots=True)
class Row:
    """One device item before its images are read."""

    where: str  # "Item 3": what error messages name
    prompt: str  # one recipe.IMAGE_SLOT per image, in the images' order
    text_start: int  # where the text that may be cut starts in `prompt`
    text_end: int
    images: tuple[Picture, ...] = ()


@dataclass(frozen=True, slots=True)
class RowTokens:
    """A row as the device reads it."""

    input_ids: np.ndarray  # int32, every image's placeholders expanded
    aux: np.ndarray  # int32, on each image placeholder its image's patch-grid width, else 0
    pixels: list[np.ndarray]  # [H, W, 3] uint8 per image, resized, in prompt order
    text_tokens: int  # tokens that are not image placeholders


class Qwen3VLRecipe:
    """One model's tokenizer, special tokens, image settings and prompt limit."""

    def __init__(self, tokenizer: Tokenizer, spec: recipe.VisionSpec, limit: int) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self.spec = spec
        self.limit = limit
        image_pad_id = tokenizer.token_to_id(recipe.IMAGE_PAD)
        if image_pad_id is None:
            raise ValueError(f"the tokenizer has no {recipe.IMAGE_PAD} token")
        self.image_pad_id: int = image_pad_id
        added = tokenizer.get_added_tokens_decoder().values()
        # What a reranker's texts may not contain (SIE's rule): the tokens that steer the template.
        self.reserved = frozenset(t.content for t in added if t.special) | set(recipe.VISION_TOKENS)

    @classmethod
    def for_model(cls, config: ModelConfig) -> Qwen3VLRecipe:
        tokenizer = Tokenizer.from_file(str(resolve_tokenizer_file(config)))
        spec = recipe.vision_spec(resolve_weights_dir(config))
        return cls(tokenizer, spec, config.max_sequence_length or DEFAULT_LIMIT)

    def picture(self, image: Picture, max_pixels: int) -> np.ndarray:
        """An image's pixels at the model's size (decoded first if still bytes)."""
        if isinstance(image, np.ndarray):
            return image
        return self.decoded(image.data, image.format, image.where, max_pixels)

    def decoded(self, data: bytes, declared: str | None, where: str, max_pixels: int) -> np.ndarray:
        """Image bytes decoded (a 400 naming `where` when they cannot be) and resized."""
        return self.resized(decode_image(data, declared, max_pixels, where).pixels, where)

    def resized(self, pixels: np.ndarray, where: str) -> np.ndarray:
        """Pillow's bicubic resize to `smart_resize`'s size, as Qwen2VLImageProcessor resizes."""
        height, width = pixels.shape[:2]
        try:
            new_h, new_w = recipe.smart_resize(height, width, self.spec)
        except ValueError as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        if (new_h, new_w) == (height, width):
            return pixels
        return resize_pixels(pixels, new_w, new_h, recipe.BICUBIC)

    def resized_bytes(self, image: Picture) -> int:
        """The bytes of an image once resized, read from its header (an unreadable header counts
        the largest size; the decode reports the error)."""
        if isinstance(image, np.ndarray):
            return int(image.nbytes)
        size = resized_size(image.data, lambda height, width: recipe.smart_resize(height, width, self.spec))
        if size is None:
            return self.spec.max_pixels * 3
        return size[0] * size[1] * 3

    def tokens(self, row: Row, pixels: Sequence[np.ndarray], limit: int) -> RowTokens:
        """The row's ids, placeholders expanded, its text cut to fit `limit` tokens."""
        encoding = self._tokenizer.encode(row.prompt)
        ids = np.asarray(encoding.ids, np.int32)
        slots = np.flatnonzero(ids == self.image_pad_id)
        if len(slots) != len(pixels):
            raise InvalidInput(
                f"{row.where}: the prompt holds {len(slots)} image placeholders for {len(pixels)} images"
            )
        repeats = np.ones(len(ids), np.int64)
        widths = np.zeros(len(ids), np.int32)
        patch, merge = self.spec.patch_size, self.spec.merge_size
        for slot, image in zip(slots.tolist(), pixels, strict=True):
            grid_h, grid_w = image.shape[0] // patch, image.shape[1] // patch
            repeats[slot], widths[slot] = grid_h * grid_w // (merge * merge), grid_w
        image_tokens = int(repeats[slots].sum())
        total = len(ids) - len(slots) + image_tokens
        if total > limit:
            self._cut_text(repeats, encoding.offsets, row, total - limit)
        return RowTokens(
            input_ids=np.repeat(ids, repeats),
            aux=np.repeat(widths, repeats),
            pixels=list(pixels),
            text_tokens=int(repeats.sum()) - image_tokens,
        )

    def _cut_text(self, repeats: np.ndarray, offsets: list[tuple[int, int]], row: Row, excess: int) -> None:
        """Drop the last `excess` tokens lying wholly inside the row's text (repeats set to 0)."""
        inside = [
            i for i, (start, end) in enumerate(offsets) if row.text_start <= start < end <= row.text_end
        ]
        if excess > len(inside):
            protected = int(repeats.sum()) - len(inside)
            raise InvalidInput(
                f"{row.where}: the prompt's template, instruction and images take {protected} tokens, "
                f"over the limit of {protected + len(inside) - excess}"
            )
        repeats[inside[len(inside) - excess :]] = 0


def check_text(text: str | None, where: str, reserved: frozenset[str] | set[str]) -> None:
    """A 400 when the text holds one of `reserved` (tokens that would rewrite the prompt)."""
    if not text:
        return
    found = next((token for token in reserved if token in text), None)
    if found is not None:
        raise InvalidInput(f"{where}: text must not contain the model's control token {found!r}")


def recipe_of(state: FrontendState, target: Target) -> Qwen3VLRecipe:
    """The model's recipe, made once."""
    config = target.config
    return state.tokenizers.built(config, "qwen3_vl", lambda: Qwen3VLRecipe.for_model(config))


def row_limit(requested: object, ceiling: int) -> int:
    """A request's `options.max_seq_length` (a positive integer), at most the model's limit."""
    if requested is None:
        return ceiling
    if isinstance(requested, bool) or not isinstance(requested, int) or requested <= 0:
        raise InvalidInput("options.max_seq_length must be a positive integer")
    return min(requested, ceiling)
