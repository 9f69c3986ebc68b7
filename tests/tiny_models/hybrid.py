"""A tiny random-weight BGE-M3-style hybrid model: an XLM-R encoder plus FlagEmbedding's two heads
(`sparse_linear.pt`, `colbert_linear.pt`), with MiniLM's real tokenizer (vocab 30522)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
VOCAB_SIZE = 30522
HIDDEN_SIZE = 32
COLBERT_DIM = 16  # not the hidden size, so a test sees that the head's own shape is used
MAX_SEQUENCE_LENGTH = 128
# MiniLM's WordPiece ids: the encoder's config names them as BGE-M3's names <pad>, <s> and </s>.
PAD_ID, UNK_ID, CLS_ID, SEP_ID = 0, 100, 101, 102


def make_hybrid(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors encoder, the two heads and MiniLM's tokenizer into `folder`."""
    import torch
    import transformers

    from tests.integration.reference import minilm_dir

    config = transformers.XLMRobertaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN_SIZE,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        # XLM-R counts positions from pad_token_id + 1, so it needs one more than the longest item.
        max_position_embeddings=MAX_SEQUENCE_LENGTH + PAD_ID + 1,
        type_vocab_size=1,
        pad_token_id=PAD_ID,
        bos_token_id=CLS_ID,
        eos_token_id=SEP_ID,
    )
    torch.manual_seed(seed)
    model = transformers.XLMRobertaModel(config).eval()  # with the pooler, as AutoModel loads it
    sparse_linear = torch.nn.Linear(HIDDEN_SIZE, 1)
    colbert_linear = torch.nn.Linear(HIDDEN_SIZE, COLBERT_DIM)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    torch.save(sparse_linear.state_dict(), folder / "sparse_linear.pt")
    torch.save(colbert_linear.state_dict(), folder / "colbert_linear.pt")
    source = minilm_dir()
    for name in TOKENIZER_FILES:
        shutil.copy(source / name, folder / name)
    return folder


def model_yaml_hybrid(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {
            "encode": {
                "dense": {"dim": HIDDEN_SIZE},
                "sparse": {"dim": VOCAB_SIZE},
                "multivector": {"dim": COLBERT_DIM},
            }
        },
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "adapter": "hybrid",
    }
