"""Alibaba's GTE checkpoints of `model_type: new` on transformers' own GTE classes, without the
checkpoints' modeling code (which configs qualify: sie.gte_new_config).

A "new" config.json is translated to a `GteConfig`, and the folder's weights load into `GteModel` or
`GteForMaskedLM` (transformers' weight conversion maps new-impl's names and splits its packed
projections). Fixed NTK (`rope_scaling: {type: ntk, factor: k}`), which transformers' GTE lacks, is
new-impl's frequency rule: the base becomes `theta * k` and every inverse frequency is divided by
`k ** (2 / head_dim)`, at every length; it is written into the loaded rotary module.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sie.gte_new_config import read_config, unsupported, with_defaults

_NATIVE_CLASSES = {"AutoModel": "GteModel", "AutoModelForMaskedLM": "GteForMaskedLM"}


@dataclass(frozen=True, slots=True)
class NativeGte:
    """The transformers class and config that load a "new" folder, and its fixed NTK factor."""

    model_class: Any
    config: Any  # transformers.GteConfig
    ntk_factor: float | None


def native_gte(auto_class: Any, weights_dir: Path) -> NativeGte | None:
    """How to load `weights_dir` natively for `auto_class`, or None when it is not a "new" folder,
    the auto class has no native counterpart, or the config is one the native classes cannot run."""
    class_name = _NATIVE_CLASSES.get(getattr(auto_class, "__name__", ""))
    raw = read_config(weights_dir)
    if class_name is None or raw is None or unsupported(raw) is not None:
        return None
    import transformers  # deferred: importing transformers is slow

    settings = with_defaults(raw)
    config = transformers.GteConfig(
        vocab_size=settings["vocab_size"],
        hidden_size=settings["hidden_size"],
        num_hidden_layers=settings["num_hidden_layers"],
        num_attention_heads=settings["num_attention_heads"],
        intermediate_size=settings["intermediate_size"],
        hidden_act=settings["hidden_act"],
        max_position_embeddings=settings["max_position_embeddings"],
        type_vocab_size=settings["type_vocab_size"],
        layer_norm_eps=settings["layer_norm_eps"],
        pad_token_id=raw.get("pad_token_id"),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": float(settings["rope_theta"])},
    )
    scaling = settings["rope_scaling"]
    ntk_factor = float(scaling["factor"]) if scaling is not None else None
    return NativeGte(getattr(transformers, class_name), config, ntk_factor)


def ntk_inverse_frequencies(theta: float, head_dim: int, factor: float) -> torch.Tensor:
    """new-impl's fixed-NTK inverse frequencies (float32 [head_dim / 2])."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    return 1.0 / (theta * factor) ** exponents / factor ** (2 / head_dim)


def apply_ntk(model: Any, native: NativeGte) -> None:
    """Write the fixed-NTK frequencies into the loaded model's rotary module (a no-op without)."""
    if native.ntk_factor is None:
        return
    config = native.config
    rotary = model.base_model.rotary_emb
    head_dim = config.hidden_size // config.num_attention_heads
    theta = float(config.rope_parameters["rope_theta"])
    frequencies = ntk_inverse_frequencies(theta, head_dim, native.ntk_factor).to(rotary.inv_freq.device)
    rotary.inv_freq.copy_(frequencies)
    rotary.original_inv_freq.copy_(frequencies)
