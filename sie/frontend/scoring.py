"""Cross-encoder scores: the activation sentence-transformers would apply, one score per item, ranks.

The device returns raw logits [n, num_labels]; everything here is numpy on the frontend.

Activation. `CrossEncoder` (sentence-transformers 5/6) takes the first of: the `activation_fn`
saved in config_sentence_transformers.json (only read for a saved CrossEncoder: modules.json
present and `model_type` "CrossEncoder"), `config.json`'s `sentence_transformers.activation_fn`
(v4+), `config.json`'s `sbert_ce_default_activation_function` (before v4); a path is honoured
only if it starts with "torch." (the rest needs trust_remote_code, which sie never grants).
Otherwise sigmoid for one label, identity for more. The model YAML's `runtime.activation` wins.

Multi-label rerankers. sentence-transformers' `predict` returns the whole activated row for
them, and SIE 0.10.1 has no single score (its cross-encoder adapter hands the [n, k] array to
code expecting one float per pair). Here an item's score is the activated row's *last* label:
two-label rerankers are binary classifiers whose label 1 is "relevant" (ms-marco style), so with
`activation: softmax` in the YAML the score is P(relevant). The default for more than one label
is identity, so without that setting the score is label k-1's raw logit.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

ACTIVATIONS = ("sigmoid", "softmax", "identity")
# torch classes sentence-transformers may save, by their class name (the path's last part).
_TORCH_ACTIVATIONS = {"Sigmoid": "sigmoid", "Softmax": "softmax", "Identity": "identity"}
# transformers' PretrainedConfig assumes two labels when config.json names none.
_DEFAULT_NUM_LABELS = 2


def activation_of(weights_dir: Path, configured: str | None) -> str:
    """The activation name: `configured` if given, else the one CrossEncoder would apply."""
    if configured is not None:
        if configured not in ACTIVATIONS:
            raise ValueError(f"unknown activation {configured!r} (known: {', '.join(ACTIVATIONS)})")
        return configured
    config = read_json(weights_dir / "config.json") or {}
    path = _saved_activation(weights_dir, config)
    if path is not None:
        name = _TORCH_ACTIVATIONS.get(path.rsplit(".", 1)[-1])
        if name is not None:
            return name
        # sentence-transformers would apply it; sie can't, so warn and keep the default's ranking.
        logger.warning("%s: activation %s is not supported, using the default", weights_dir, path)
    return "sigmoid" if num_labels(config) == 1 else "identity"


def _saved_activation(weights_dir: Path, config: dict[str, Any]) -> str | None:
    """The first trusted (torch.*) activation path saved with the model, in CrossEncoder's order."""
    saved = read_json(weights_dir / "config_sentence_transformers.json")
    is_cross_encoder = saved is not None and saved.get("model_type") == "CrossEncoder"
    if is_cross_encoder and (weights_dir / "modules.json").is_file():
        path = _trusted(saved.get("activation_fn") if saved else None)
        if path is not None:
            return path
    st_config = config.get("sentence_transformers")
    if isinstance(st_config, dict) and "activation_fn" in st_config:
        return _trusted(st_config["activation_fn"])
    return _trusted(config.get("sbert_ce_default_activation_function"))


def _trusted(path: object) -> str | None:
    return path if isinstance(path, str) and path.startswith("torch.") else None


def num_labels(config: dict[str, Any]) -> int:
    """The label count transformers derives from a config.json mapping."""
    id2label = config.get("id2label")
    if isinstance(id2label, dict):
        return len(id2label)
    return int(config.get("num_labels") or _DEFAULT_NUM_LABELS)


def read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as fh:
        data = json.load(fh)
    return data if isinstance(data, dict) else None


def activate(logits: np.ndarray, activation: str) -> np.ndarray:
    """The activation applied to float logits [n, k] (softmax across the k labels)."""
    x = np.asarray(logits, dtype=np.float32)
    if activation == "sigmoid":
        # Written per sign so exp never overflows (numpy would warn for logits below about -88).
        e = np.exp(-np.abs(x))
        return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(np.float32)
    if activation == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    if activation == "identity":
        return x
    raise ValueError(f"unknown activation {activation!r}")


def item_scores(logits: np.ndarray, activation: str) -> np.ndarray:
    """float32 [n] ranking scores: the activated logit, or the last label's for several labels."""
    rows = np.asarray(logits, dtype=np.float32).reshape(len(logits), -1)
    activated: np.ndarray = activate(rows, activation)[:, -1]
    return activated


def rank(scores: np.ndarray, item_ids: list[str]) -> list[dict[str, Any]]:
    """Every item as {"item_id", "score", "rank"}, best first (rank 0); ties keep input order."""
    if len(scores) != len(item_ids):
        raise ValueError(f"{len(scores)} scores for {len(item_ids)} items")
    values = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    return [
        {"item_id": item_ids[i], "score": float(values[i]), "rank": position}
        for position, i in enumerate(order.tolist())
    ]
