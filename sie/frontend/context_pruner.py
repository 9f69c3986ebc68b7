"""A context pruner's keep scores, turned into character spans of the passage (SIE's recipe).

Each passage token gets a label from its keep probability: `highlight` at or above the highlight
threshold, `kept` at or above the prune threshold, else `pruned`. Consecutive tokens of one label
whose characters touch (at most one character apart) form one span, scored by the mean of its
tokens' probabilities. The first entity of an item is its summary: label `summary`, the relevance
score as its score, and `rerank=... compression=...% kept=k/n` as its text, where compression is
the share of spans pruned.

Skipped, as SIE skips them: the query's tokens, the pair layout's special tokens, tokens whose id
is the tokenizer's padding, separator, classifier or beginning token (a passage may spell one out),
and tokens whose span is (0, 0).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from sie.frontend.model_files import read_json_object, token_content

_SKIPPED_ROLES = ("pad_token", "sep_token", "cls_token", "bos_token")


def keep_spans(
    text: str,
    spans: np.ndarray,
    token_ids: np.ndarray,
    keep: np.ndarray,
    skipped_ids: Collection[int],
    prune_threshold: float,
    highlight_threshold: float,
) -> list[dict[str, Any]]:
    """The passage's spans: `spans` int32 [n, 2] per token ((0, 0) off the passage), `keep` each
    token's keep probability."""
    found: list[dict[str, Any]] = []
    start = end = -1
    label = ""
    probabilities: list[float] = []
    for (char_start, char_end), token_id, probability in zip(
        spans.tolist(), token_ids.tolist(), keep.tolist(), strict=True
    ):
        if char_start == char_end == 0 or token_id in skipped_ids:
            continue
        token_label = _label(probability, prune_threshold, highlight_threshold)
        if probabilities and token_label == label and char_start <= end + 1:
            end = max(end, char_end)
            probabilities.append(probability)
            continue
        if probabilities:
            found.append(_entity(text, start, end, label, probabilities))
        start, end, label, probabilities = char_start, char_end, token_label, [probability]
    if probabilities:
        found.append(_entity(text, start, end, label, probabilities))
    return found


def summary(relevance: float, spans: list[dict[str, Any]]) -> dict[str, Any]:
    kept = sum(1 for span in spans if span["label"] != "pruned")
    compression = 1.0 - kept / max(len(spans), 1)
    text = f"rerank={relevance:.4f} compression={compression:.2%} kept={kept}/{len(spans)}"
    return {"text": text, "label": "summary", "score": relevance, "start": None, "end": None, "bbox": None}


def skipped_token_ids(weights_dir: Path, tokenizer: Tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's padding, separator, classifier and beginning tokens, as its
    special_tokens_map.json (else tokenizer_config.json) names them."""
    names = {  # the map wins, as in transformers
        **read_json_object(weights_dir / "tokenizer_config.json"),
        **read_json_object(weights_dir / "special_tokens_map.json"),
    }
    ids = set()
    for role in _SKIPPED_ROLES:
        token = token_content(names.get(role))
        token_id = tokenizer.token_to_id(token) if token is not None else None
        if token_id is not None:
            ids.add(token_id)
    return frozenset(ids)


def _label(probability: float, prune_threshold: float, highlight_threshold: float) -> str:
    if probability >= highlight_threshold:
        return "highlight"
    if probability >= prune_threshold:
        return "kept"
    return "pruned"


def _entity(text: str, start: int, end: int, label: str, probabilities: list[float]) -> dict[str, Any]:
    score = sum(probabilities) / len(probabilities)
    return {"text": text[start:end], "label": label, "score": score, "start": start, "end": end, "bbox": None}
