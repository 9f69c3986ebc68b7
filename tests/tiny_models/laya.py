"""A tiny random-weight Laya checkpoint in the published layout, built with the `laya` package.

The folder holds what `laya.Agent` and our adapter read: `rl_agent_config.json`,
`model.safetensors` (the package's DecisionModel: `encoder.*`, `head.*`, `type_emb.*`,
`scorer.*`, `act_head.*`, `temperature`), `encoder/config.json` (a tiny ModernBertConfig) and
`tokenizer/` (MiniLM's WordPiece tokenizer, whose [CLS]/[SEP]/[MASK] play ModernBERT's).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.tiny_models.cross_encoder import CLS, PAD, SEP, VOCAB_SIZE

MAX_LEN = 128
HEAD_MAX_LEN = 48
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
# Calibrated buckets as the published checkpoints ship them (one clamped, one per-bucket).
AGENT_CONFIG: dict[str, Any] = {
    "encoder": "answerdotai/ModernBERT-base",
    "max_len": MAX_LEN,
    "head_max_len": HEAD_MAX_LEN,
    "head_layers": 2,
    "act_costs": {"escalate": 1.0},
    "temperature": [1.3, 0.8, 2.0],
    "temperature_by_options": {"choice:3-5": 1.7, "choice:11+": 0.7},
}


def make_laya(folder: Path, seed: int = 0) -> Path:
    """Write the checkpoint into `folder`; return it."""
    import torch
    import transformers
    from laya.common import DecisionModel
    from safetensors.torch import save_file

    config = transformers.ModernBertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=96,
        max_position_embeddings=MAX_LEN,
        local_attention=16,
        global_attn_every_n_layers=2,
        pad_token_id=PAD,
        bos_token_id=CLS,
        eos_token_id=SEP,
        cls_token_id=CLS,
        sep_token_id=SEP,
        initializer_range=0.2,  # wide, so the option logits spread
    )
    torch.manual_seed(seed)
    encoder = transformers.AutoModel.from_config(config, attn_implementation="sdpa")
    model = DecisionModel(encoder, head_layers=2, n_act=2)
    with torch.no_grad():  # a head that reads the row clearly: wider than its default init
        for name, p in model.named_parameters():
            if not name.startswith("encoder.") and p.dim() > 1:
                p.normal_(0.0, 0.3)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "encoder").mkdir(exist_ok=True)
    config.save_pretrained(folder / "encoder")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    (folder / "rl_agent_config.json").write_text(json.dumps(AGENT_CONFIG), encoding="utf-8")
    _write_tokenizer(folder / "tokenizer")
    return folder


def model_yaml_laya(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": MAX_LEN,
        "adapter": "laya",
    }


def reference_agent(folder: Path) -> Any:
    """The package's own Agent on the checkpoint, float32 on CPU."""
    from laya.agent import Agent

    return Agent(str(folder), device="cpu")


def _write_tokenizer(target: Path) -> None:
    from tests.integration.reference import minilm_dir

    target.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, target / name)
