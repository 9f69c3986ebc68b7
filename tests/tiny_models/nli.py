"""A tiny random-weight NLI classifier (BertForSequenceClassification, 3 labels) for zero-shot tests.

Labels are in the MNLI order of many checkpoints: 0 contradiction, 1 neutral, 2 entailment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.tiny_models.cross_encoder import MAX_SEQUENCE_LENGTH, make_cross_encoder

LABELS = ("contradiction", "neutral", "entailment")


def make_nli(folder: Path, seed: int = 0, *, arch: str = "bert") -> Path:
    """Write config, safetensors weights and MiniLM's tokenizer into `folder`; return it."""
    id2label = dict(enumerate(LABELS))
    label2id = {label: i for i, label in id2label.items()}
    return make_cross_encoder(
        folder, seed, num_labels=len(LABELS), arch=arch, id2label=id2label, label2id=label2id
    )


def model_yaml_nli(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "adapter": "nli_zero_shot",
    }
