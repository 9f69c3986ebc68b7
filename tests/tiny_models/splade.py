"""A tiny random-weight SPLADE model (BertForMaskedLM) with MiniLM's real tokenizer."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
VOCAB_SIZE = 30522
MAX_SEQUENCE_LENGTH = 128
# The random head's logits are centred near 0 (std about 0.11), so about half the vocabulary
# would get a weight. This shift leaves a few hundred terms per sentence, as a trained SPLADE has.
LOGIT_SHIFT = -0.3


def make_splade(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors weights and MiniLM's tokenizer into `folder`; return it."""
    import torch
    import transformers

    from tests.integration.reference import minilm_dir

    config = transformers.BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=MAX_SEQUENCE_LENGTH,
    )
    torch.manual_seed(seed)
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        model.cls.predictions.bias.fill_(LOGIT_SHIFT)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    source = minilm_dir()
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    return folder


def model_yaml_splade(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"encode": {"sparse": {"dim": VOCAB_SIZE}}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "adapter": "splade",
    }
