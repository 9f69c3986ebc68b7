"""The OCR models that transcribe a page by generating (LightOnOCR-2, GLM-OCR, PaddleOCR-VL): what
both sides read. Each item is one page and a chat prompt whose one image token stands for the page; the prompt
travels after a generation header, the page as its resized pixels, and the device returns the
generated ids.

Each family has its page sizing (sie.page_config: PixtralPages, GridPages) and SIE's defaults below:
the conversation's system turn, the text after the page when the request gives no instruction (or,
for PaddleOCR-VL, its task's prompt), and the most tokens a page may take.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sie.page_config import PageLayout, glm_pages, paddle_pages, pixtral_pages

HEADER = 1  # ids before an item's prompt on the ring: its max new tokens


@dataclass(frozen=True, slots=True)
class OcrFamily:
    name: str  # what messages call it
    system_prompt: str | None  # SIE's system turn, unless the profile sets `system_prompt`
    default_prompt: str | None  # the text after the page when a request gives no instruction
    max_new_tokens: int  # the ceiling when the profile sets none
    pages: Callable[[Path], PageLayout]  # the folder's page sizing and normalization
    task_prompts: Mapping[str, str] = field(default_factory=dict)  # task -> its prompt (none: no tasks)
    task_labels: Mapping[str, str] = field(default_factory=dict)  # an entity's label, when not "markdown"
    default_task: str | None = None


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
PADDLEOCR_VL = OcrFamily(
    name="PaddleOCR-VL",
    system_prompt=None,
    default_prompt=None,
    max_new_tokens=4096,
    pages=paddle_pages,
    task_prompts={
        "ocr": "OCR:",
        "table": "Table Recognition:",
        "formula": "Formula Recognition:",
        "chart": "Chart Recognition:",
        "spotting": "Spotting:",
        "seal": "Seal Recognition:",
    },
    task_labels={"spotting": "spotting", "seal": "seal"},
    default_task="ocr",
)
FAMILIES = {"lighton_ocr": LIGHTON_OCR, "glm_ocr": GLM_OCR, "paddleocr_vl": PADDLEOCR_VL}


def image_token_id(folder: Path) -> int:
    """The id config.json gives the image token, which the model's image features replace."""
    found = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("image_token_id")
    if not isinstance(found, int):
        raise ValueError(f"{folder}/config.json names no image_token_id")
    return found
