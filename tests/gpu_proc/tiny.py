"""Tiny random-weight encoders of each architecture, and small helpers the adapter tests share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.model_config import ModelConfig, parse_model_config
from sie.shm.layout import Op

if TYPE_CHECKING:
    from transformers import PretrainedConfig

TINY: dict[str, Any] = {
    "vocab_size": 100,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 128,
}
ARCHS = ["bert", "roberta", "mpnet", "modernbert"]


def tiny_config(arch: str) -> PretrainedConfig:
    import transformers

    if arch == "bert":
        return transformers.BertConfig(**TINY)
    if arch == "roberta":
        # One token type, padding id 1, positions counted from pad+1: the RoBERTa quirks.
        return transformers.XLMRobertaConfig(**TINY, type_vocab_size=1, pad_token_id=1)
    if arch == "mpnet":
        return transformers.MPNetConfig(**TINY, pad_token_id=1)
    if arch == "modernbert":
        # Local attention window smaller than the longest test item, so both attention kinds run.
        special: dict[str, Any] = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}
        layer_types = ["full_attention", "sliding_attention"]
        return transformers.ModernBertConfig(
            **TINY, **special, cls_token_id=2, sep_token_id=3, layer_types=layer_types, local_attention=16
        )
    raise ValueError(arch)


def model_config(arch: str, pooling: str = "mean", **profile: object) -> ModelConfig:
    runtime = {"pooling": pooling}
    body: dict[str, object] = {"adapter": "dense", "adapter_options": {"runtime": runtime}, **profile}
    return parse_model_config({"sie_id": f"tiny/{arch}", "profiles": {"default": body}})


def random_items(n: int, seed: int, max_len: int = 40) -> list[np.ndarray]:
    # Ids from 4 up: no special token (pad included) inside an item, as a real tokenizer ensures.
    rng = np.random.default_rng(seed)
    return [rng.integers(4, 100, rng.integers(1, max_len + 1)).astype(np.int32) for _ in range(n)]


def as_batch(items: list[np.ndarray], types: Sequence[np.ndarray | None] | None = None) -> Batch:
    types = types or [None] * len(items)
    pending = [
        PendingItem(0, 1, i, ids, tt, 0.0, 0) for i, (ids, tt) in enumerate(zip(items, types, strict=True))
    ]
    lengths = [len(ids) for ids in items]
    return Batch(GroupKey(0, int(Op.ENCODE), 1, 0, 0), pending, sum(lengths), max(lengths), 0.0)
