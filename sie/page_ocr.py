"""The OCR models that transcribe a page by generating (LightOnOCR-2, GLM-OCR): what both sides
read. Each item is one page and a chat prompt whose one image token stands for the page; the prompt
travels after a generation header, the page as its resized pixels, and the device returns the
generated ids.

Each family has its page sizing (sie.page_config: PixtralPages, GlmPages) and SIE's defaults below:
the conversation's system turn, the text after the page when the request gives no instruction, and
the most tokens a page may take.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sie.page_config import PageLayout, glm_pages, pixtral_pages

HEADER = 1  # ids before an item's prompt on the ring: its max new tokens


@dataclass(frozen=True, slots=True)
class OcrFamily:
    name: str  # what messages call it
    system_prompt: str | None  # SIE's system turn, unless the profile sets `system_prompt`
    default_prompt: str | None  # the text after the page when a request gives no instruction
    max_new_tokens: int  # the ceiling when the profile sets none
    pages: Callable[[Path], PageLayout]  # the folder's page sizing and normalization


LIGHTON_OCR = OcrFamily(
    name="LightOnOCR",
    system_prompt="You are an OCR engine. Return the markdown representation of the document.",
    default_prompt=None,
    max_new_tokens=4096,
    pages=pixtral_pages,
)
GLM_OCR = OcrFamily(
    name="GLM-OCR",
    system_prompt=None,
    default_prompt="Text Recognition:",
    max_new_tokens=8192,
    pages=glm_pages,
)
FAMILIES = {"lighton_ocr": LIGHTON_OCR, "glm_ocr": GLM_OCR}


def image_token_id(folder: Path) -> int:
    """The id config.json gives the image token, which the model's image features replace."""
    found = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("image_token_id")
    if not isinstance(found, int):
        raise ValueError(f"{folder}/config.json names no image_token_id")
    return found
