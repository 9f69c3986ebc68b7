"""Token-classification logits -> entity spans, as transformers' NER pipeline groups them.

`aggregate_simple` reproduces `TokenClassificationPipeline` with `aggregation_strategy="simple"`
(transformers 5.x, `pipelines/token_classification.py`) on one item's logits:

- softmax per token, then argmax; the token's score is its winning probability;
- special tokens are skipped (here: tokens whose character span is (0, 0), as
  `TextTokenizer.encode_with_offsets` marks them);
- adjacent tokens are grouped while the tag (label without "B-"/"I-") stays the same and the new
  token is not a "B-"; a label with neither prefix counts as "I-" of itself, and "O" tokens group
  like any other tag (the groups are dropped afterwards by `ignore_labels`);
- a group's label is its first token's label after the first "-"; its score the mean of its tokens'
  scores; its span runs from the first token's start to the last token's end.

"simple" never merges on sub-words: the pipeline computes `is_subword` but only the word-level
strategies ("first", "average", "max") read it, so "spring"/"##field" tagged B-CITY, B-CITY are two
entities. `join_touching=True` (not the pipeline's behaviour) also joins a "B-" token onto a group of
its tag when no character separates them, which is how BIO models that tag every sub-word "B-"
(the Rampart PII model does) still give whole spans.

The pipeline's `word` is the tokens decoded back to a string (lowercased by uncased tokenizers,
spacing rebuilt); `text` here is the caller's text sliced at the span, so it is always exactly the
characters `start:end` name.
"""

from __future__ import annotations

import json
from collections.abc import Set
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_IGNORE_LABELS = frozenset({"O"})


def id2label_of(weights_dir: Path) -> dict[int, str]:
    """The model's label names by class index, from its config.json."""
    with (Path(weights_dir) / "config.json").open() as fh:
        config = json.load(fh)
    return {int(index): str(name) for index, name in config["id2label"].items()}


def aggregate_simple(
    logits: np.ndarray,
    offsets: np.ndarray,
    text: str,
    id2label: dict[int, str],
    ignore_labels: Set[str] = DEFAULT_IGNORE_LABELS,
    *,
    join_touching: bool = False,
) -> list[dict[str, Any]]:
    """One item's entities from its per-token logits [len, num_labels] and spans [len, 2]."""
    if len(logits) != len(offsets):
        raise ValueError(f"{len(logits)} rows of logits for {len(offsets)} token spans")
    real = (offsets[:, 0] != 0) | (offsets[:, 1] != 0)
    probs = _softmax(np.asarray(logits, dtype=np.float32)[real])
    winners = probs.argmax(axis=-1)
    scores = probs[np.arange(len(winners)), winners]
    spans = offsets[real].tolist()
    tags = {index: _tag(name) for index, name in id2label.items()}

    entities: list[dict[str, Any]] = []
    first = 0
    for i in range(1, len(winners) + 1):
        if i < len(winners) and _continues(tags, winners, spans, i, join_touching):
            continue
        label = id2label[int(winners[first])].split("-", 1)[-1]
        if label not in ignore_labels:
            start, end = spans[first][0], spans[i - 1][1]
            score = float(np.nanmean(scores[first:i]))
            entities.append(
                {
                    "text": text[start:end],
                    "label": label,
                    "score": score,
                    "start": start,
                    "end": end,
                    "bbox": None,
                }
            )
        first = i
    return entities


def _continues(
    tags: dict[int, tuple[bool, str]],
    winners: np.ndarray,
    spans: list[list[int]],
    i: int,
    join_touching: bool,
) -> bool:
    """Whether token i joins the group of token i - 1."""
    is_begin, tag = tags[int(winners[i])]
    if tag != tags[int(winners[i - 1])][1]:
        return False
    return not is_begin or (join_touching and spans[i][0] == spans[i - 1][1])


def _tag(label: str) -> tuple[bool, str]:
    """(is "B-", tag) as the pipeline's `get_tag` reads a label; no prefix counts as "I-"."""
    if label.startswith(("B-", "I-")):
        return label.startswith("B-"), label[2:]
    return False, label


def _softmax(logits: np.ndarray) -> np.ndarray:
    # float32 throughout, as the pipeline computes it, so argmax ties resolve the same way.
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    result: np.ndarray = shifted / shifted.sum(axis=-1, keepdims=True)
    return result
