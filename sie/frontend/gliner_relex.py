"""GLiNER joint entity-relation ("relex") models, frontend half: request options and relation decoding.

A relex model reads GLiNER's prompt with a second part, `<<REL>> relation ... <<SEP>>` (built by
`GlinerPrompts.encode`). Inside its forward it takes the spans whose best label clears the entity
threshold as relation candidates (at most `MAX_RELATION_CANDIDATES` per item, in span order), keeps
the ordered candidate pairs its adjacency layer scores above `adjacency_threshold(threshold)`, and
scores each kept pair against every relation type.

The device returns, per item, the span logits as the plain GLiNER family does, then one row per
kept pair: head start word, head end word, tail start word, tail end word, and one logit per
relation type. `decode_relations` turns those into relations as gliner's `SpanRelexDecoder` does:
a pair counts only when both spans are among the decoded entities, and each relation type whose
sigmoid exceeds the relation threshold gives one relation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.gliner import decode_spans, entity_of
from sie.frontend.wire import option_fraction

# Relation candidates per item: the forward scores every ordered pair, so memory grows with the
# square of this. SIE keeps the same number (the first ones in span order).
MAX_RELATION_CANDIDATES = 100
# A low entity threshold turns nearly every span into a candidate; SIE refuses relex requests below it.
MIN_RELEX_THRESHOLD = 0.1
# The adjacency threshold never falls below gliner's usual value because of a low entity threshold.
MIN_ADJACENCY_THRESHOLD = 0.5
MAX_LABEL_CHARS = 128  # SIE's cap on one label or relation type
PAIR_FIELDS = 4  # head start, head end, tail start, tail end (words, ends inclusive)


@dataclass(frozen=True, slots=True)
class RelexOptions:
    relation_labels: list[str]
    relation_threshold: float


def adjacency_threshold(threshold: float) -> float:
    return max(threshold, MIN_ADJACENCY_THRESHOLD)


def relex_options(
    options: dict[str, Any],
    labels: Sequence[str],
    threshold: float,
    configured: float | None,
    max_labels: int,
) -> RelexOptions:
    """options.relation_labels (optional: none gives entities only) and options.relation_threshold
    (else the profile's runtime.relation_threshold, else the entity threshold, as gliner does)."""
    if threshold < MIN_RELEX_THRESHOLD:
        raise InvalidInput(
            f"GLiNER entity-relation models need a threshold of at least {MIN_RELEX_THRESHOLD}"
        )
    relation_labels = checked_relation_labels(options.get("relation_labels"))
    if len(relation_labels) + len(labels) > max_labels:
        raise InvalidInput(
            f"labels and options.relation_labels must contain at most {max_labels} entries together"
        )
    if any(len(label) > MAX_LABEL_CHARS for label in [*labels, *relation_labels]):
        raise InvalidInput(f"labels and relation types must have at most {MAX_LABEL_CHARS} characters each")
    value = options.get("relation_threshold", configured if configured is not None else threshold)
    return RelexOptions(relation_labels, option_fraction("relation_threshold", value))


def checked_relation_labels(value: Any) -> list[str]:
    """The requested relation types, stripped as SIE strips them; [] when none were asked for."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput("options.relation_labels must be a list of relation types")
    if any(not isinstance(label, str) or not label.strip() for label in value):
        raise InvalidInput("options.relation_labels must be non-empty strings")
    labels = [label.strip() for label in value]
    if len(set(labels)) != len(labels):
        raise InvalidInput("options.relation_labels must be unique")
    return labels


def decode_item(
    values: np.ndarray,
    words: Sequence[tuple[int, int]],
    text: str,
    labels: Sequence[str],
    relex: RelexOptions,
    max_width: int,
    threshold: float,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One item's entities and relations from its device rows (`labels` already de-duplicated)."""
    n_words = len(words)
    span_logits, pairs = split_item(values, n_words * max_width * len(labels), len(relex.relation_labels))
    spans = decode_spans(span_logits, n_words, len(labels), threshold, flat_ner=True, multi_label=False)
    entities = [entity_of(span, labels, words, text) for span in spans]
    entity_words = [(span.start, span.end) for span in spans]
    relations = decode_relations(
        pairs, entities, entity_words, relex.relation_labels, relex.relation_threshold
    )
    return entities, relations


def split_item(values: np.ndarray, n_span_logits: int, n_relations: int) -> tuple[np.ndarray, np.ndarray]:
    """One item's device rows: (span logits, pair rows [n_pairs, 4 + n_relations])."""
    flat = np.asarray(values, dtype=np.float32).reshape(-1)
    pairs = flat[n_span_logits:]
    width = PAIR_FIELDS + n_relations
    if n_relations == 0 or pairs.size == 0:
        return flat[:n_span_logits], np.zeros((0, width), np.float32)
    if pairs.size % width:
        raise ValueError(f"{pairs.size} relation values do not make rows of {width}")
    return flat[:n_span_logits], pairs.reshape(-1, width)


def decode_relations(
    pairs: np.ndarray,
    entities: Sequence[dict[str, Any]],
    entity_words: Sequence[tuple[int, int]],
    relation_labels: Sequence[str],
    threshold: float,
) -> list[dict[str, Any]]:
    """Relations among one item's decoded entities, highest score first (SIE's order).

    `entity_words[k]` is entity k's (first word, last word); a candidate span maps to the first
    entity with the same words, as gliner maps it.
    """
    first_entity: dict[tuple[int, int], int] = {}
    for index, span in enumerate(entity_words):
        first_entity.setdefault(tuple(span), index)
    with np.errstate(over="ignore"):  # exp overflow gives the right 0
        probs = 1.0 / (1.0 + np.exp(-pairs[:, PAIR_FIELDS:]))
    relations = []
    for row, row_probs in zip(pairs[:, :PAIR_FIELDS].astype(np.int64).tolist(), probs, strict=True):
        head = first_entity.get((row[0], row[1]))
        tail = first_entity.get((row[2], row[3]))
        if head is None or tail is None:
            continue
        for c in np.nonzero(row_probs > np.float32(threshold))[0].tolist():
            relations.append(
                {
                    "head": entities[head]["text"],
                    "tail": entities[tail]["text"],
                    "relation": relation_labels[c],
                    "score": float(row_probs[c]),
                }
            )
    relations.sort(key=lambda r: (-r["score"], r["relation"], r["head"], r["tail"]))
    return relations
