"""Qwen3-VL's recipe, read by both sides: the chat prompts, the image budget and the vision settings.

The frontend builds each item's prompt and resizes its images; the device turns the pixels into
patches and checks, at load, that the model's own chat template renders the prompts written here.
So this module imports neither torch nor Pillow.

The recipe is SIE's (its Qwen3-VL embedding and reranker adapters):

- embedding: system turn = the instruction (stripped, with a period added unless it ends in
  punctuation; default "Represent the user's input."), user turn = the item's images, then its
  text; the generation prompt follows, and the vector is the last token's final hidden state.
- reranker: system turn = the yes/no judge prompt; user turn = "<Instruct>: {instruction}",
  "<Query>:", the query's image and text, "\\n<Document>:", the document's image and text ("NULL"
  for a side with neither); the score is sigmoid(yes - no) of the next-token logits.
- images: resized with Pillow's bicubic filter so each side is a multiple of patch x merge pixels
  and the area lies within SIE's pixel budget (256 x 28 x 28 to 1280 x 28 x 28, Qwen's
  `smart_resize`), then normalized and cut into patches on the device.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sie import qwen_images
from sie.media_config import channel_triple

# SIE's image budget (the processor's min_pixels / max_pixels), whatever the folder's config says.
MIN_PIXELS = 256 * 28 * 28
MAX_PIXELS = 1280 * 28 * 28
BICUBIC = 3

IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
VISION_TOKENS = (IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END)
IMAGE_SLOT = f"{VISION_START}{IMAGE_PAD}{VISION_END}"  # one image in a user turn, before expansion

EMBED_DEFAULT_INSTRUCTION = "Represent the user's input."
RERANK_DEFAULT_INSTRUCTION = "Retrieve relevant documents for the query."
RERANK_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
_NULL = "NULL"  # a reranker side with neither text nor image


@dataclass(frozen=True, slots=True)
class VisionSpec:
    """How images become patches: the processor's settings with SIE's pixel budget."""

    patch_size: int
    merge_size: int
    temporal_patch_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rescale_factor: float
    min_pixels: int = MIN_PIXELS
    max_pixels: int = MAX_PIXELS

    @property
    def factor(self) -> int:
        """Resized sides are multiples of this many pixels (one merged token's side)."""
        return self.patch_size * self.merge_size


def vision_spec(folder: Path) -> VisionSpec:
    """The folder's preprocessor_config.json, else config.json's vision settings with Qwen3-VL's
    normalization (mean and std 0.5), which is what a checkpoint without its own processor gets."""
    processor = _json(folder / "preprocessor_config.json")
    vision = _json(folder / "config.json").get("vision_config") or {}
    do_rescale = processor.get("do_rescale", True)
    do_normalize = processor.get("do_normalize", True)
    return VisionSpec(
        patch_size=int(processor.get("patch_size") or vision.get("patch_size") or 16),
        merge_size=int(processor.get("merge_size") or vision.get("spatial_merge_size") or 2),
        temporal_patch_size=int(
            processor.get("temporal_patch_size") or vision.get("temporal_patch_size") or 2
        ),
        mean=channel_triple(processor.get("image_mean", 0.5)) if do_normalize else (0.0, 0.0, 0.0),
        std=channel_triple(processor.get("image_std", 0.5)) if do_normalize else (1.0, 1.0, 1.0),
        rescale_factor=float(processor.get("rescale_factor", 1 / 255)) if do_rescale else 1.0,
    )


def smart_resize(height: int, width: int, spec: VisionSpec) -> tuple[int, int]:
    """(height, width) after Qwen's resize: sides rounded to the factor, area within the budget."""
    return qwen_images.smart_resize(height, width, spec.factor, spec.min_pixels, spec.max_pixels)


def normalize_instruction(instruction: str) -> str:
    """Stripped, with a period unless it already ends in punctuation (SIE's embedding instruction)."""
    stripped = instruction.strip()
    if stripped and not unicodedata.category(stripped[-1]).startswith("P"):
        stripped += "."
    return stripped


def _head(system: str) -> str:
    """ChatML up to the user turn's content, as Qwen3-VL's template renders a system turn."""
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n"


_TAIL = "<|im_end|>\n<|im_start|>assistant\n"  # the user turn's end and the generation prompt


def embedding_prompt(instruction: str, n_images: int, text: str | None) -> tuple[str, int]:
    """The item's prompt (one IMAGE_SLOT per image) and where its text starts in it."""
    head = _head(instruction) + IMAGE_SLOT * n_images
    return head + (text or "") + _TAIL, len(head)


def reranker_prompt(
    instruction: str, query: str | None, query_image: bool, document: str | None, document_image: bool
) -> tuple[str, int]:
    """The pair's prompt (one IMAGE_SLOT per image) and where the document's text starts in it."""
    head = f"{_head(RERANK_SYSTEM)}<Instruct>: {instruction}<Query>:{_side(query, query_image)}\n<Document>:"
    head += IMAGE_SLOT if document_image else ""
    return head + (document or ("" if document_image else _NULL)) + _TAIL, len(head)


def _side(text: str | None, image: bool) -> str:
    if not text and not image:
        return _NULL
    return (IMAGE_SLOT if image else "") + (text or "")


# SIE's conversations, message by message, as its adapters hand them to the processor's chat
# template; the device renders them with the model's own template and checks the prompts above.
def embedding_conversation(instruction: str, n_images: int, text: str | None) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [{"type": "image"} for _ in range(n_images)]
    if text:
        content.append({"type": "text", "text": text})
    return [
        {"role": "system", "content": [{"type": "text", "text": instruction}]},
        {"role": "user", "content": content or [{"type": "text", "text": ""}]},
    ]


def reranker_conversation(
    instruction: str, query: str | None, query_image: bool, document: str | None, document_image: bool
) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": f"<Instruct>: {instruction}"},
        *_side_parts("<Query>:", query, query_image),
        *_side_parts("\n<Document>:", document, document_image),
    ]
    return [
        {"role": "system", "content": [{"type": "text", "text": RERANK_SYSTEM}]},
        {"role": "user", "content": content},
    ]


def _side_parts(prefix: str, text: str | None, image: bool) -> Sequence[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": prefix}]
    if image:
        parts.append({"type": "image"})
    if text:
        parts.append({"type": "text", "text": text})
    if not text and not image:
        parts.append({"type": "text", "text": _NULL})
    return parts


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    found = json.loads(path.read_text(encoding="utf-8"))
    return found if isinstance(found, dict) else {}
