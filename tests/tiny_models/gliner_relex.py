"""A tiny random-weight GLiNER joint entity-relation ("relex") model, built offline like tiny GLiNER.

Same encoder, tokenizer and calibration as tests/tiny_models/gliner.py, plus a relations layer
(adjacency) and gliner's pair projection, so the forward picks candidates and scores pairs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tests.tiny_models.gliner import (
    CALIBRATION_LABELS,
    CALIBRATION_TEXT,
    ENCODER,
    MAX_LEN,
    MAX_WIDTH,
    TOKENIZER_FILES,
    _encoder_config,
    _spread_scores,
)

CALIBRATION_RELATIONS = ["works at", "lives in", "born on"]
RELATION_STD = 0.5  # spread of the relation prompts' projection, so relation scores vary by type


def make_gliner_relex(folder: Path, seed: int = 0, relations_layer: str = "dot") -> Path:
    """Write a relex model (gliner_config.json names its relations layer) into `folder`; return it."""
    import torch
    from gliner import GLiNER, GLiNERConfig

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    config = GLiNERConfig(
        model_name=str(folder),
        encoder_config=_encoder_config("bert"),
        hidden_size=32,
        max_width=MAX_WIDTH,
        max_len=MAX_LEN,
        dropout=0.0,
        span_mode="markerV0",
        relations_layer=relations_layer,
    )
    torch.manual_seed(seed)
    model = GLiNER.from_config(config, backbone_from_pretrained=False, local_files_only=True)
    _spread_scores(model)
    _spread_relations(model)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


# The profile's default relation threshold (SIE's catalog entry for the large model says 0.7).
RELATION_THRESHOLD = 0.6


def model_yaml_gliner_relex(sie_id: str, folder: Path) -> dict[str, Any]:
    runtime = {"relation_threshold": RELATION_THRESHOLD}
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": ENCODER["max_position_embeddings"],
        "profiles": {"default": {"adapter": "gliner", "adapter_options": {"runtime": runtime}}},
    }


def _spread_relations(model: Any) -> None:
    """Relation logits of a random pair projection sit near 0 (p ~ 0.5 for every type); a wider
    projection makes them differ by pair and by type, so thresholds pick some and not others."""
    import torch

    with torch.no_grad():
        for layer in model.model.pair_rep_layer.modules():
            if isinstance(layer, torch.nn.Linear):
                layer.weight.normal_(0.0, RELATION_STD)
    model.inference([CALIBRATION_TEXT], CALIBRATION_LABELS, relations=CALIBRATION_RELATIONS)
