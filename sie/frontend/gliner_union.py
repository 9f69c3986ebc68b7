"""GLiNER unions, frontend half: the windows a text is read in and how the members' spans compose.

The recipe is SIE's GLiNERUnionAdapter's, after its PII redaction study:

1. Windows. A text of more than `window_words` words (GLiNER's words) is read as windows of that
   many words, each sharing `window_overlap` words with the next; a shorter one is read whole.
   Spans found in a window are moved back to the text's offsets.
2. Members. Every member reads every window with the request's labels, at its own settings; a span
   scoring below `score_floor` is dropped.
3. Union. Spans with the same start, end and label are one span, at the higher score; overlapping
   spans of other extents or labels are all kept.
4. Names. With `propagate_label`, every other whole-word, case-sensitive occurrence of a run of at
   least `name_min_letters` letters taken from a span of that label, not inside a span already,
   becomes a span of that label, scored as the best span it came from.

Entities come out sorted by (start, end).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sie.frontend.gliner import WORD_PATTERN
from sie.gliner_union import UnionOptions

LETTER = r"[^\W\d_]"  # a word character that is neither a digit nor an underscore


@dataclass(frozen=True, slots=True)
class Span:
    """A member's span in the text's offsets."""

    start: int
    end: int
    label: str
    score: float


def word_windows(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    """The (start, end) characters of the windows `text` is read in: all of it for `size` words or
    fewer, else `size`-word windows, each starting `size - overlap` words after the one before."""
    words = [match.span() for match in WORD_PATTERN.finditer(text)]
    if len(words) <= size:
        return [(0, len(text))]
    windows = []
    for first in range(0, len(words), size - overlap):
        last = min(first + size, len(words)) - 1
        windows.append((words[first][0], words[last][1]))
        if last == len(words) - 1:
            break
    return windows


def union_spans(member_spans: Sequence[Sequence[Span]], floor: float) -> list[Span]:
    """Every member's spans at `floor` or above, one per (start, end, label) at its best score,
    sorted by (start, end) (ties in the order first found)."""
    best: dict[tuple[int, int, str], Span] = {}
    for spans in member_spans:
        for span in spans:
            if span.score < floor:
                continue
            key = (span.start, span.end, span.label)
            if key not in best or span.score > best[key].score:
                best[key] = span
    return sorted(best.values(), key=lambda span: (span.start, span.end))


def propagated(text: str, spans: Sequence[Span], label: str, min_letters: int) -> list[Span]:
    """New `label` spans at the other occurrences of the names in `spans` of that label."""
    name = re.compile(f"{LETTER}{{{min_letters},}}")
    scores: dict[str, float] = {}
    for span in spans:
        if span.label == label:
            for token in name.findall(text[span.start : span.end]):
                scores[token] = max(scores.get(token, span.score), span.score)
    added = []
    for token in sorted(scores):
        for match in re.finditer(f"(?<!{LETTER}){re.escape(token)}(?!{LETTER})", text):
            start, end = match.span()
            if not any(span.start <= start and end <= span.end for span in spans):
                added.append(Span(start, end, label, scores[token]))
    return added


def compose(text: str, member_spans: Sequence[Sequence[Span]], options: UnionOptions) -> list[dict[str, Any]]:
    """One text's entities from its members' spans."""
    spans = union_spans(member_spans, options.score_floor)
    if options.propagate_label:
        spans += propagated(text, spans, options.propagate_label, options.name_min_letters)
    spans.sort(key=lambda span: (span.start, span.end))
    return [
        {
            "text": text[span.start : span.end],
            "label": span.label,
            "score": span.score,
            "start": span.start,
            "end": span.end,
            "bbox": None,
        }
        for span in spans
    ]
