"""Florence-2's generated text -> entities and objects, as its processor's `post_process_generation`
parses it.

Locations are `<loc_0>` .. `<loc_999>` bins of the original image's width and height; a bin's
coordinate is its centre, (bin + 0.5) * size / 1000, in float32 as the processor computes it (which
then truncates each to a whole pixel; SIE's boxes truncate x, y, width and height, so corners stay
floats here and the response's `bbox` is built from them). Per task:

- text tasks (OCR, captions, DocVQA): the text without `<s>` / `</s>`, one entity;
- `<OCR_WITH_REGION>`: `text` + 8 locations per line (a quadrilateral); one entity per line, its
  `bbox` the quadrilateral's bounding box [x, y, width, height]; lines smaller than the rules' area
  share of the image dropped (the processor's shoelace sum, on whole pixels);
- `<OD>`, `<DENSE_REGION_CAPTION>`: `phrase` + 4 locations per box (a phrase may have several);
  `<REGION_PROPOSAL>`: boxes without phrases (labelled "object", as SIE does);
- `<CAPTION_TO_PHRASE_GROUNDING>`: as `<OD>`, less phrases on the rules' banned list.

Every entity and object scores 1.0: the model gives no confidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TEXT_LABELS = {
    "<OCR>": "text",
    "<CAPTION>": "caption",
    "<DETAILED_CAPTION>": "caption",
    "<MORE_DETAILED_CAPTION>": "caption",
    "<DocVQA>": "answer",
}
OCR_REGIONS = "<OCR_WITH_REGION>"
GROUNDING = "<CAPTION_TO_PHRASE_GROUNDING>"
DESCRIBED_BOXES = frozenset({"<OD>", "<DENSE_REGION_CAPTION>"})
BARE_BOXES = "<REGION_PROPOSAL>"
BINS = 1000
_LOC = r"<loc_(\d+)>"
OCR_PATTERN = r"(.+?)" + _LOC * 8
_PHRASE = re.compile(r"([^<]+(?:<loc_\d+>){4,})")
_BARE = re.compile(r"(?:(?:<loc_\d+>){4,})")
_PHRASE_TEXT = re.compile(r"^\s*(.*?)(?=<od>|</od>|<box>|</box>|<bbox>|</bbox>|<loc_)")
_BOX = re.compile(_LOC * 4)
# The pronouns and fillers microsoft's processor keeps out of grounded phrases.
ORIGINAL_BANNED = frozenset(
    [
        *("it", "I", "me", "mine", "you", "your", "yours", "he", "him", "his", "she", "her", "hers"),
        *("they", "them", "their", "theirs", "one", "oneself", "we", "us", "our", "ours", "its"),
        *("myself", "yourself", "himself", "herself", "itself", "ourselves", "yourselves", "themselves"),
        *("this", "that", "these", "those", "who", "whom", "whose", "which", "what", "all", "another"),
        *("any", "anybody", "anyone", "anything", "each", "everybody", "everyone", "everything", "few"),
        *("many", "nobody", "none", "several", "some", "somebody", "someone", "something", "lots"),
        *("each other", "one another", "the image", "image", "images", "the", "a", "an", "a group"),
        *("other objects", "a set"),
    ]
)


@dataclass(frozen=True, slots=True)
class ParseRules:
    ocr_area_threshold: float = 0.0  # share of the image an OCR line must cover (0: keep all)
    ocr_pattern: str | None = None  # the processor config's own OCR pattern, if it names one
    banned_phrases: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class Answer:
    entities: list[dict[str, Any]]
    objects: list[dict[str, Any]]


def answer_of(text: str, task: str, size: tuple[int, int], rules: ParseRules) -> Answer:
    """One item's answer, from its decoded generation (special tokens kept) and its image's
    (width, height)."""
    if task in TEXT_LABELS:
        return Answer([{"text": pure_text(text), "label": TEXT_LABELS[task], "score": 1.0}], [])
    if task == OCR_REGIONS:
        lines = ocr_lines(text, size, rules)
        return Answer(
            [{"text": t, "label": "text", "score": 1.0, "bbox": _quad_bbox(q)} for t, q in lines], []
        )
    if task == GROUNDING:
        found = phrase_boxes(text, size, rules.banned_phrases)
    else:
        found = described_boxes(text, size, allow_empty=task == BARE_BOXES)
    return Answer([], [{"label": label or "object", "score": 1.0, "corners": box} for label, box in found])


def pure_text(text: str) -> str:
    return text.replace("<s>", "").replace("</s>", "").strip()


def _without_markers(text: str) -> str:
    return text.replace("<s>", "").replace("</s>", "").replace("<pad>", "")


def dequantize(bins: list[int], size: tuple[int, int]) -> list[float]:
    """Bin centres of x, y, x, y, ... in pixels, in the processor's float32 arithmetic."""
    width, height = size
    steps = np.tile(np.array([width / BINS, height / BINS], np.float32), len(bins) // 2)
    return (np.asarray(bins, np.float32) + np.float32(0.5)) * steps  # type: ignore[no-any-return]


def ocr_lines(text: str, size: tuple[int, int], rules: ParseRules) -> list[tuple[str, list[float]]]:
    """(text, quadrilateral x0, y0, .., x3, y3) per line."""
    lines = []
    width, height = size
    for content, *bins in re.findall(rules.ocr_pattern or OCR_PATTERN, _without_markers(text)):
        quad = dequantize([int(b) for b in bins], size)
        if (
            rules.ocr_area_threshold > 0
            and _area(quad.astype(np.int32).tolist()) < width * height * rules.ocr_area_threshold
        ):
            continue
        lines.append((content.strip(), [float(v) for v in quad]))
    return lines


def _area(quad: list[int]) -> float:
    """The processor's shoelace sum over three of the four edges."""
    xs, ys = quad[0::2], quad[1::2]
    return 0.5 * abs(sum(xs[i] * ys[i + 1] - xs[i + 1] * ys[i] for i in range(3)))


def _quad_bbox(quad: list[float]) -> list[int]:
    xs, ys = quad[0::2], quad[1::2]
    x0, y0, x1, y1 = min(xs), min(ys), max(xs), max(ys)
    return [int(x0), int(y0), int(x1 - x0), int(y1 - y0)]


def phrase_boxes(text: str, size: tuple[int, int], banned: frozenset[str]) -> list[tuple[str, list[float]]]:
    """(phrase, corners) per box of each grounded phrase not banned."""
    found = []
    for phrase, boxes in _phrases(_PHRASE.findall(_without_markers(text)), size, allow_empty=False):
        if phrase not in banned:
            found.extend((_ascii(phrase), box) for box in boxes)
    return found


def described_boxes(text: str, size: tuple[int, int], *, allow_empty: bool) -> list[tuple[str, list[float]]]:
    """(phrase, corners) per box; with `allow_empty`, boxes need no phrase before them."""
    pattern = _BARE if allow_empty else _PHRASE
    found = []
    for phrase, boxes in _phrases(pattern.findall(_without_markers(text)), size, allow_empty=allow_empty):
        found.extend((_ascii(phrase), box) for box in boxes)
    return found


def _phrases(
    pieces: list[str], size: tuple[int, int], *, allow_empty: bool
) -> list[tuple[str, list[list[float]]]]:
    """Each piece's phrase (before its first location) and its boxes, as the processor reads them."""
    parsed = []
    for piece in pieces:
        piece = piece.replace("<ground>", "", 1).replace("<obj>", "", 1)
        if not piece and not allow_empty:
            continue
        match = _PHRASE_TEXT.search(piece)
        boxes = [[int(b) for b in box.groups()] for box in _BOX.finditer(piece)]
        if match is None or not boxes:
            continue
        corners = [[float(v) for v in dequantize(box, size)] for box in boxes]
        parsed.append((match.group().strip(), corners))
    return parsed


def _ascii(phrase: str) -> str:
    return phrase.encode("ascii", "ignore").decode("ascii")
