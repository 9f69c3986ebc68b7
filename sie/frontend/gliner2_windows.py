"""GLiNER2 classification of a text longer than the word window: overlapping windows, pooled.

SIE's adapter classifies such a text as windows of `max_words` words, each starting at the last
64 words of the one before (at most half of them), at most 128 windows, and pools the windows'
classifications into one: a label's confidence is its best in any window (multi-label); a
single-label text takes one window's answer, the one taking `positive_label` most confidently if
any does (else, with two labels, the least confident window, where the positive label is likeliest),
otherwise the most confident window. Ties go to the earliest window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.gliner2 import split_words

OVERLAP_WORDS = 64
MAX_WINDOWS = 128

Found = list[tuple[str, float]]  # a window's (label, confidence) picks, as gliner2 returns them


def windows(text: str, max_words: int) -> list[str]:
    """The texts the model classifies for `text`: itself when it fits one window."""
    _, spans = split_words(text)
    if len(spans) <= max_words:
        return [text]
    out: list[str] = []
    first = 0
    while True:
        last = min(first + max_words, len(spans))
        start = spans[first][0] if first else 0
        if last == len(spans):
            out.append(text[start:])
            return out
        if len(out) + 1 >= MAX_WINDOWS:
            raise InvalidInput(
                f"GLiNER2 classifies a text in at most {MAX_WINDOWS} windows of {max_words} words; "
                "this text needs more. Split it into several items."
            )
        end = spans[last - 1][1]
        out.append(text[start : end + 1 if end < len(text) and text[end].isspace() else end])
        shared = min(OVERLAP_WORDS, (last - first) // 2)
        first = last - shared if shared else last


def picks(logits: np.ndarray, labels: Sequence[str], *, multi_label: bool, threshold: float) -> Found:
    """gliner2's answer for one window: the best label (softmax), or every label at or above the
    threshold (sigmoid), the best when none is."""
    z = np.asarray(logits, np.float32)
    if multi_label:
        probs = 1.0 / (1.0 + np.exp(-z))
    else:
        shifted = np.exp(z - z.max())
        probs = shifted / shifted.sum()
    best = int(np.argmax(probs))
    chosen = [j for j in range(len(labels)) if float(probs[j]) >= threshold] if multi_label else []
    return [(labels[j], float(probs[j])) for j in chosen or [best]]


def pool(found: list[Found], *, n_labels: int, multi_label: bool, positive_label: str | None) -> Found:
    """One text's picks from its windows' picks (see the module docstring)."""
    if multi_label:
        best: dict[str, float] = {}
        for window in found:
            for label, score in window:
                if label not in best or score > best[label]:
                    best[label] = score
        return list(best.items())
    chosen = [window[0] for window in found if window]
    if not chosen:
        return []
    if positive_label is not None:
        positive = [one for one in chosen if one[0] == positive_label]
        if positive:
            return [max(positive, key=lambda one: one[1])]
        if n_labels == 2:
            return [min(chosen, key=lambda one: one[1])]
    return [max(chosen, key=lambda one: one[1])]


def ranked(found: Found, threshold: float) -> list[dict[str, Any]]:
    """SIE's classifications: those at or above the threshold, best first."""
    kept = sorted(((label, score) for label, score in found if score >= threshold), key=lambda c: -c[1])
    return [{"label": label, "score": score} for label, score in kept]
