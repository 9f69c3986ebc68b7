"""GLiNER2 frontend half, coming out: the device's raw values to entities, classes and fields.

Each decision is gliner2 2.x's (`inference/runtime.py`) followed by SIE's flattening
(`sie_server/adapters/gliner2/adapter.py`):
- a span is a (start word, width) whose score is >= the threshold and ends inside the text;
  per field, spans are taken best first skipping any that overlaps one taken (by characters);
  a structure's values then drop those whose lowercased text repeats one taken; entities sort
  by start;
- a classification is a softmax over the labels (sigmoid per label when multi-label): the best
  label, or every label at or above the threshold (the best when none is); SIE keeps those at or
  above the threshold, best first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sie.frontend.gliner2 import Schema, Words
from sie.frontend.gliner2_windows import picks, ranked


@dataclass(frozen=True, slots=True)
class Span:
    text: str
    score: float
    start: int  # characters in the text as the model read it
    end: int


def split_values(values: np.ndarray, schemas: Sequence[Schema], n_words: int, max_width: int) -> list[Any]:
    """One item's flat values cut per schema: logits [labels] for a classification, and for a
    span schema its instances' scores [count, fields, words, width] (count 0: nothing found)."""
    flat = np.asarray(values, np.float32).reshape(-1)
    out: list[Any] = []
    pos = 0
    for schema in schemas:
        n_fields = len(schema.fields)
        if schema.kind == "classification":
            out.append(flat[pos : pos + n_fields])
            pos += n_fields
            continue
        count = int(flat[pos])
        pos += 1
        size = count * n_fields * n_words * max_width
        out.append(flat[pos : pos + size].reshape(count, n_fields, n_words, max_width))
        pos += size
    if pos != len(flat):
        raise ValueError(f"GLiNER2 returned {len(flat)} values where the schemas take {pos}")
    return out


def find_spans(scores: np.ndarray, threshold: float, words: Words, n_text_words: int) -> list[Span]:
    """gliner2's `_find_spans` over one field's [words, width] scores, in (start, width) order."""
    starts, widths = np.nonzero(scores >= np.float32(threshold))
    found = []
    for start, width in zip(starts.tolist(), widths.tolist(), strict=True):
        end = start + width + 1
        if not (0 <= start < n_text_words and end <= n_text_words):
            continue
        char_start, char_end = words.spans[start][0], words.spans[end - 1][1]
        text = words.text[char_start:char_end].strip()
        if text:
            found.append(Span(text, float(scores[start, width]), char_start, char_end))
    return found


def best_spans(spans: list[Span], *, unique_text: bool = True) -> list[Span]:
    """gliner2's `_format_spans`: best first without overlaps. Values of a structure's field are
    then kept once per text (compared lowercased), as `format_struct` keeps them; entities, which
    carry their offsets, are not (the same word twice is two entities)."""
    chosen: list[Span] = []
    for span in sorted(spans, key=lambda s: -s.score):
        if all(span.end <= c.start or span.start >= c.end for c in chosen):
            chosen.append(span)
    if not unique_text:
        return chosen
    seen: set[str] = set()
    unique = []
    for span in chosen:
        if span.text.lower() not in seen:
            seen.add(span.text.lower())
            unique.append(span)
    return unique


def entities(
    scores: np.ndarray, labels: Sequence[str], words: Words, original: str, threshold: float
) -> list[dict[str, Any]]:
    """Entities from an entity schema's scores [count, labels, words, width] (instance 0 is read)."""
    if len(scores) == 0:
        return []
    n_text_words = len(words.spans)
    found = []
    for index, label in enumerate(labels):
        spans = find_spans(scores[0, index, -n_text_words:], threshold, words, n_text_words)
        for span in best_spans(spans, unique_text=False):
            entity = source_entity(span, label, original)
            if entity is not None:
                found.append(entity)
    found.sort(key=lambda e: e["start"])
    return found


def source_entity(span: Span, label: str, original: str) -> dict[str, Any] | None:
    """The span in the caller's text, as SIE clips it: a span running into the "." gliner2 appended
    ends at the text's end. One lying wholly in that "." is dropped (SIE fails the request on it)."""
    start, end = span.start, min(span.end, len(original))
    if start >= len(original):
        return None
    if span.end <= len(original) and original[start:end] != span.text:
        raise ValueError("GLiNER2 span offsets do not index the text")  # lowercasing changed its length
    return {
        "text": original[start:end],
        "label": label,
        "score": span.score,
        "start": start,
        "end": end,
        "bbox": None,
    }


def classes(
    logits: np.ndarray, labels: Sequence[str], *, multi_label: bool, threshold: float
) -> list[dict[str, Any]]:
    """One classification schema's result as SIE returns it: label and score, best first."""
    return ranked(picks(logits, labels, multi_label=multi_label, threshold=threshold), threshold)
