"""LightOnOCR's settings both sides read: the ring's generation header, SIE's defaults, the image
token. Its pages are sized by Pixtral's rule (sie.page_config.PixtralPages); the one image token of
its prompt becomes one copy per prompt token of the page, as LightOnOcrProcessor expands it.
"""

from __future__ import annotations

import json
from pathlib import Path

DEFAULT_SYSTEM_PROMPT = "You are an OCR engine. Return the markdown representation of the document."
DEFAULT_MAX_NEW_TOKENS = 4096
HEADER = 1  # ids before an item's prompt on the ring: its max new tokens


def image_token_id(folder: Path) -> int:
    """The id config.json gives the image token, which the model's image features replace."""
    found = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("image_token_id")
    if not isinstance(found, int):
        raise ValueError(f"{folder}/config.json names no image_token_id")
    return found
