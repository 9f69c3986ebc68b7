"""Tiny random-weight dense encoders (BERT) with MiniLM's real WordPiece tokenizer, of a chosen size.

The many-models tests need several distinct models of a known size. Most of the weights sit in the
feed-forward layers, which every forward reads (a CPU process's RSS counts only the pages it
touched, and a sentence touches few rows of the 30522-word embedding table): about 60 MB each.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_SEQUENCE_LENGTH = 128


HIDDEN = 256


def make_dense(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors weights and a tokenizer into `folder`; return it."""
    import torch
    import transformers

    from tests.integration.reference import minilm_dir

    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=HIDDEN,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=16 * HIDDEN,
        max_position_embeddings=MAX_SEQUENCE_LENGTH,
    )
    torch.manual_seed(seed)
    model = transformers.BertModel(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    return folder


def model_yaml_dense(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"encode": {"dense": {"dim": HIDDEN}}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "adapter": "dense",
    }
