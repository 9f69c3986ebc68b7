"""GLiNER2.5 boundary checkpoints in the frontend: their rows going in, their entities coming out.

The row is the span checkpoints' (sie/frontend/gliner2.py); its limits differ (`for_model`).
Labels may carry descriptions, written into the schema's prompt.

Out of the device come, per label, candidate spans of words with their probabilities
(sie/gpu_proc/adapters/gliner2_boundary.py). A label abstains when the head says so; a candidate
is kept at or above the threshold, or when the checkpoint's predicted count keeps it; the kept
spans go through the checkpoint's overlap rule (`resolve_overlaps`), then become characters.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.gliner2 import (
    Gliner2Prompts,
    Words,
    check_field_names,
    prompt_limit,
)
from sie.frontend.gliner2_decode import Span, source_entity
from sie.gliner2_checkpoint import CANDIDATE_COLUMNS, Gliner2Checkpoint
from sie.model_location import resolve_weights_dir

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

DEFAULT_ROW_TOKENS = 4096  # SIE's bound on a row when a profile sets none
Scored = tuple[float, int, int]  # probability, start word, end word (exclusive)


class BoundaryPrompts(Gliner2Prompts):
    """Rows for a boundary checkpoint: the span checkpoints' rows, bounded as SIE bounds them."""

    @classmethod
    def for_model(cls, config: ModelConfig) -> BoundaryPrompts:
        """For these checkpoints SIE's max_sequence_length bounds a whole row (schema, separator and
        text) in tokens, not a text in words; a row-token admits at most four words."""
        row = config.max_sequence_length or DEFAULT_ROW_TOKENS
        prompts = cls.from_dir(resolve_weights_dir(config), 4 * row, prompt_limit(config))
        limits = prompts.limits
        prompts.limits = replace(
            limits,
            max_text_tokens=min(limits.max_text_tokens, row),
            max_row_tokens=min(row, limits.max_row_tokens or row),
        )
        return prompts


def checked_labels(labels: Any) -> list[str]:
    """Labels as SIE's GLiNER2 entity adapter takes them: exact (case, punctuation and spaces
    kept), non-blank, distinct, and free of the prompt's marker tokens."""
    if not isinstance(labels, list) or not labels:
        raise InvalidInput("GLiNER2 entities requires a non-empty list of labels")
    if any(not isinstance(label, str) or not label.strip() for label in labels):
        raise InvalidInput("GLiNER2 entity labels must be non-blank strings")
    if len(set(labels)) != len(labels):
        raise InvalidInput("GLiNER2 entity labels must be unique")
    check_field_names(labels, "entity labels")
    return list(labels)


def entities(
    values: np.ndarray,
    labels: Sequence[str],
    words: Words,
    original: str,
    threshold: float,
    checkpoint: Gliner2Checkpoint,
) -> list[dict[str, Any]]:
    """One row's entities, every label's, sorted by where they start."""
    found: list[dict[str, Any]] = []
    for label, (abstention, rows) in zip(labels, label_candidates(values, len(labels)), strict=True):
        if abstention > checkpoint.abstention_threshold:  # NaN (no abstention head) never is
            continue
        kept = rows[(rows[:, 2] >= np.float32(threshold)) | (rows[:, 3] > 0)]
        scored = [(float(p), int(s), int(e)) for s, e, p, _ in kept.tolist()]
        # Boundaries come out distinct, so gliner2's (text, start, end) dedupe has nothing to drop.
        for probability, start, end in resolve_overlaps(scored, checkpoint.overlap_policy):
            if not 0 <= start < end <= len(words.spans):
                continue
            char_start, char_end = words.spans[start][0], words.spans[end - 1][1]
            surface = words.text[char_start:char_end].strip()
            if not surface:
                continue
            entity = source_entity(Span(surface, probability, char_start, char_end), label, original)
            if entity is not None:
                found.append(entity)
    found.sort(key=lambda e: e["start"])
    return found


def label_candidates(values: np.ndarray, n_labels: int) -> list[tuple[float, np.ndarray]]:
    """Cut one row's values into each label's (abstention, candidates [n, CANDIDATE_COLUMNS])."""
    flat = np.asarray(values, np.float32).reshape(-1)
    out = []
    pos = 0
    for _ in range(n_labels):
        if pos + 2 > len(flat):
            raise ValueError("GLiNER2 returned fewer candidate lists than labels")
        abstention, n = float(flat[pos]), int(flat[pos + 1])
        rows = flat[pos + 2 : pos + 2 + n * CANDIDATE_COLUMNS].reshape(n, CANDIDATE_COLUMNS)
        out.append((abstention, rows))
        pos += 2 + n * CANDIDATE_COLUMNS
    if pos != len(flat):
        raise ValueError(f"GLiNER2 returned {len(flat)} values where the labels take {pos}")
    return out


def resolve_overlaps(spans: list[Scored], policy: str) -> list[Scored]:
    """gliner2's overlap rules over (probability, start, end) spans, half-open.

    Spans with the same boundaries count once (the best). "allow" keeps the rest; "nested" keeps
    disjoint and containing spans but no crossings, best first; "longest" drops spans strictly
    inside another; "disallow" keeps the set of disjoint spans with the largest total probability
    (weighted interval scheduling; on equal totals the larger set, then the better-ranked one).
    The result is ranked by probability, then start, then end.
    """
    ranked = sorted(_best_per_boundaries(spans), key=_rank)
    if policy == "allow":
        return ranked
    if policy == "nested":
        kept: list[Scored] = []
        for span in ranked:
            if all(_disjoint(span, k) or _contains(span, k) or _contains(k, span) for k in kept):
                kept.append(span)
        return kept
    if policy == "longest":
        return [s for s in ranked if not any(_contains(o, s) and o[1:] != s[1:] for o in ranked)]
    return sorted(_heaviest_disjoint(ranked), key=_rank)


def _best_per_boundaries(spans: list[Scored]) -> list[Scored]:
    best: dict[tuple[int, int], Scored] = {}
    for span in sorted(spans, key=_rank):
        best.setdefault((span[1], span[2]), span)
    return list(best.values())


def _heaviest_disjoint(spans: list[Scored]) -> list[Scored]:
    by_end = sorted(spans, key=lambda s: (s[2], s[1], -s[0]))
    ends = [s[2] for s in by_end]
    # best[k]: the best choice among the first k spans by end, as (total, chosen indices).
    best: list[tuple[float, tuple[int, ...]]] = [(0.0, ())]
    for k, span in enumerate(by_end):
        before = bisect.bisect_right(ends, span[1], 0, k)
        total, chosen = best[before]
        take = (total + span[0], (*chosen, k))
        skip = best[k]
        best.append(_better(take, skip, lambda picked: [by_end[i] for i in picked]))
    return [by_end[i] for i in best[-1][1]]


def _better(
    a: tuple[float, tuple[int, ...]],
    b: tuple[float, tuple[int, ...]],
    spans_of: Callable[[tuple[int, ...]], list[Scored]],
) -> tuple[float, tuple[int, ...]]:
    if a[0] != b[0]:
        return a if a[0] > b[0] else b
    if len(a[1]) != len(b[1]):
        return a if len(a[1]) > len(b[1]) else b
    key_a = [_rank(s) for s in sorted(spans_of(a[1]), key=_rank)]
    key_b = [_rank(s) for s in sorted(spans_of(b[1]), key=_rank)]
    return a if key_a < key_b else b


def _rank(span: Scored) -> tuple[float, int, int]:
    return (-span[0], span[1], span[2])


def _disjoint(a: Scored, b: Scored) -> bool:
    return a[2] <= b[1] or b[2] <= a[1]


def _contains(outer: Scored, inner: Scored) -> bool:
    return outer[1] <= inner[1] and inner[2] <= outer[2]
