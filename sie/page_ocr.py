"""The OCR models that transcribe a page by generating (LightOnOCR-2 and -3, GLM-OCR, PaddleOCR-VL,
MinerU2.5): what both sides read. Each item is one page and a chat prompt whose one image token
stands for the page; the prompt travels after a generation header (`Generation`), the page as its
resized pixels, and the device returns the generated ids.

Each family has its page sizing (sie.page_config: PixtralPages, GridPages) and SIE's defaults below:
the conversation's system turn, the text after the page when the request gives no instruction (or,
for PaddleOCR-VL and MinerU2.5, its task's prompt), and the most tokens a page may take.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sie.page_config import PageLayout, glm_pages, paddle_pages, pixtral_pages, qwen_pages

HEADER = 3  # ids before an item's prompt on the ring: sie.page_ocr.Generation


@dataclass(frozen=True, slots=True)
class Generation:
    """How a batch decodes: greedily (temperature 0) or by sampling. It travels as the HEADER ids
    before each prompt, the two floats as their float32 bits."""

    max_new_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0

    def header(self) -> np.ndarray:
        floats = np.array([self.temperature, self.top_p], np.float32).view(np.int32)
        return np.concatenate([np.array([self.max_new_tokens], np.int32), floats])

    @classmethod
    def from_header(cls, ids: Sequence[int]) -> Generation:
        floats = np.array(ids[1:HEADER], np.int64).astype(np.int32).view(np.float32)
        return cls(int(ids[0]), float(floats[0]), float(floats[1]))

    def key(self) -> str:
        """What a device batch shares (part of its batch key)."""
        return f"max_new_tokens={self.max_new_tokens},temperature={self.temperature!r},top_p={self.top_p!r}"


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
    instructions: frozenset[str] | None = None  # the only instructions it takes (None: any)
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # for its chat template
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    no_repeat_ngram: int | None = None  # a verbatim repeat this long is never generated


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
# Its two trained prompts: the page alone, or "grounding" for layout blocks with their boxes; its
# makers advise sampling at temperature 0.1, not greedy decoding.
LIGHTON_OCR3 = OcrFamily(
    name="LightOnOCR-3",
    system_prompt=None,
    default_prompt=None,
    max_new_tokens=12288,
    pages=qwen_pages,
    instructions=frozenset({"grounding"}),
    template_kwargs={"enable_thinking": False},
    temperature=0.1,
    top_p=1.0,
)
# MinerU's prompts begin with a newline; its labels name the task (bracketed tasks without brackets).
MINERU_VL = OcrFamily(
    name="MinerU2.5",
    system_prompt=None,
    default_prompt=None,
    max_new_tokens=4096,
    pages=qwen_pages,
    task_prompts={
        "[default]": "\nText Recognition:",
        "table": "\nTable Recognition:",
        "equation": "\nFormula Recognition:",
        "image": "\nImage Analysis:",
        "chart": "\nImage Analysis:",
        "[layout]": "\nLayout Detection:",
    },
    task_labels={
        "[default]": "mineru_text",
        "table": "mineru_table",
        "equation": "mineru_equation",
        "image": "mineru_image",
        "chart": "mineru_chart",
        "[layout]": "mineru_layout",
    },
    default_task="[default]",
    no_repeat_ngram=100,  # MinerU's guard against runaway loops, as its transformers backend sets it
)
FAMILIES = {
    "lighton_ocr": LIGHTON_OCR,
    "lighton_ocr3": LIGHTON_OCR3,
    "glm_ocr": GLM_OCR,
    "paddleocr_vl": PADDLEOCR_VL,
    "mineru_vl": MINERU_VL,
}


def image_token_id(folder: Path) -> int:
    """The id config.json gives the image token, which the model's image features replace."""
    found = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("image_token_id")
    if not isinstance(found, int):
        raise ValueError(f"{folder}/config.json names no image_token_id")
    return found
