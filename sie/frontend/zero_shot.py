"""NLI zero-shot classification, read the way transformers' ZeroShotClassificationPipeline reads it.

Each (text, label) becomes a premise/hypothesis pair: premise = the text, hypothesis = the
template with the label in it. The device returns the NLI logits of every pair; then either
- single-label: softmax of the entailment logits across one text's labels (scores sum to 1), or
- multi-label (or only one label): per label, softmax over (contradiction, entailment).

Differences from the pipeline, all deliberate:
- The contradiction label is found by name ("contra..."); the pipeline takes id 0, or the last id
  when entailment is 0. The two agree for every usual NLI label order; the position rule is the
  fallback here when no label is named so.
- Labels of equal score keep the order they were given in; the pipeline lists the later first.
- Softmaxes subtract the maximum first, so large logits do not overflow.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.scoring import num_labels, read_json
from sie.model_config import ModelConfigError

logger = logging.getLogger(__name__)


def entailment_index(weights_dir: Path, configured_label: str | None) -> tuple[int, int]:
    """(entailment id, contradiction id) of the model's labels (config.json `id2label`).

    `configured_label` (the YAML's runtime.entailment_label) names the entailment label, matched
    case-insensitively, or gives its id.
    """
    config = read_json(weights_dir / "config.json") or {}
    raw = config.get("id2label")
    id2label = {int(i): str(name) for i, name in raw.items()} if isinstance(raw, dict) else {}
    n_labels = num_labels(config)
    if configured_label is not None:
        entail = _configured(configured_label, id2label, n_labels, weights_dir)
    else:
        entail = _named(id2label, "entail")
        if entail is None:
            entail = n_labels - 1  # the pipeline's -1, with the same warning
            logger.warning("%s: no label starts with 'entail'; using the last (%d)", weights_dir, entail)
    contradiction = _named(id2label, "contra", skip=entail)
    if contradiction is None:
        contradiction = n_labels - 1 if entail == 0 else 0
    return entail, contradiction


def _named(id2label: dict[int, str], prefix: str, skip: int | None = None) -> int | None:
    for i in sorted(id2label):
        if i != skip and id2label[i].lower().startswith(prefix):
            return i
    return None


def _configured(label: str, id2label: dict[int, str], n_labels: int, weights_dir: Path) -> int:
    by_name = {name.lower(): i for i, name in id2label.items()}
    if label.lower() in by_name:
        return by_name[label.lower()]
    if label.isdigit() and int(label) < n_labels:
        return int(label)
    known = ", ".join(id2label[i] for i in sorted(id2label))
    raise ModelConfigError(f"{weights_dir}: entailment_label {label!r} is not a label ({known})")


def nli_pairs(texts: list[str], labels: list[str], template: str) -> tuple[list[str], list[str]]:
    """(premises, hypotheses), item-major: text i's pairs are [i * len(labels), (i + 1) * len(labels))."""
    if not labels:
        raise InvalidInput("Zero-shot classification needs at least one label")
    hypotheses = [_hypothesis(template, label) for label in labels]
    premises = [text for text in texts for _ in labels]
    return premises, hypotheses * len(texts)


def _hypothesis(template: str, label: str) -> str:
    if "{}" not in template:
        raise InvalidInput(f"hypothesis_template {template!r} must contain {{}} where the label goes")
    try:
        return template.format(label)
    except (IndexError, KeyError, ValueError) as exc:
        raise InvalidInput(f"hypothesis_template {template!r} cannot be formatted: {exc}") from None


def classify(
    logits: np.ndarray, n_labels: int, labels: list[str], entail: int, contradiction: int, multi_label: bool
) -> list[list[dict[str, Any]]]:
    """Per text, [{"label", "score"}] best first, from the logits [n_texts * n_labels, k] of `nli_pairs`."""
    if n_labels != len(labels):
        raise ValueError(f"n_labels {n_labels} but {len(labels)} labels")
    rows = np.asarray(logits, dtype=np.float64)
    per_text = rows.reshape(len(rows) // n_labels, n_labels, rows.shape[-1])
    if multi_label or n_labels == 1:
        scores = _softmax(per_text[..., [contradiction, entail]])[..., 1]
    else:
        scores = _softmax(per_text[..., entail])
    return [_ranked(row, labels) for row in scores]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    result: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return result


def _ranked(scores: np.ndarray, labels: list[str]) -> list[dict[str, Any]]:
    order = np.argsort(-scores, kind="stable")
    return [{"label": labels[i], "score": float(scores[i])} for i in order.tolist()]
