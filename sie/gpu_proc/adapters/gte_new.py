"""Alibaba's GTE checkpoints of `model_type: new` (gte-multilingual-base, the gte-*-en-v1.5 line,
OpenSearch's doc-v3-gte) on transformers' own GTE classes, without the checkpoints' modeling code.

Those folders name their code in `auto_map` (the Alibaba-NLP/new-impl repository), which a box
without the Hub cannot fetch and which `trust_remote_code` would run. transformers ships the same
architecture as `GteModel` / `GteForMaskedLM` (post-norm layers, rotary positions, a gated MLP, a
packed QKV projection that its weight conversion splits on load), so a "new" config.json is
translated to a `GteConfig` and the folder's weights load into the native classes.

What the translation cannot express is refused (the caller then falls back to the folder's own
code where the model's YAML trusts it): absolute positions, RMSNorm layers, log-n attention
scaling, unpacked QKV weights, another activation than GELU (the native masked-LM head always
applies GELU), or a rotary scaling other than fixed NTK. Fixed NTK (`rope_scaling: {type: ntk,
factor: k}`) is new-impl's frequency rule: the base becomes `theta * k` and every inverse frequency
is divided by `k ** (2 / head_dim)`, at every length; it is written into the loaded rotary module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

MODEL_TYPE = "new"
# new-impl's NewConfig defaults, for keys a config.json leaves out.
_DEFAULTS: dict[str, Any] = {
    "vocab_size": 30528,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "max_position_embeddings": 2048,
    "type_vocab_size": 1,
    "layer_norm_type": "layer_norm",
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "rope",
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "pack_qkv": True,
    "logn_attention_scale": False,
}
_NATIVE_CLASSES = {"AutoModel": "GteModel", "AutoModelForMaskedLM": "GteForMaskedLM"}


@dataclass(frozen=True, slots=True)
class NativeGte:
    """The transformers class and config that load a "new" folder, and its fixed NTK factor."""

    model_class: Any
    config: Any  # transformers.GteConfig
    ntk_factor: float | None


def read_config(weights_dir: Path) -> dict[str, Any] | None:
    """config.json of a "new" folder, or None for any other folder."""
    try:
        raw = json.loads((weights_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and raw.get("model_type") == MODEL_TYPE else None


def unsupported(raw: dict[str, Any]) -> str | None:
    """Why the native GTE classes cannot compute what this "new" config describes, or None."""
    settings = {**_DEFAULTS, **raw}
    if settings["position_embedding_type"] != "rope":
        return f"position_embedding_type {settings['position_embedding_type']!r} (only rope)"
    if settings["layer_norm_type"] != "layer_norm":
        return f"layer_norm_type {settings['layer_norm_type']!r} (only layer_norm)"
    if settings["logn_attention_scale"]:
        return "logn_attention_scale"
    if not settings["pack_qkv"]:
        return "pack_qkv false"
    if settings["hidden_act"] != "gelu":
        return f"hidden_act {settings['hidden_act']!r} (only gelu)"
    scaling = settings["rope_scaling"]
    if scaling is not None and (scaling.get("type") != "ntk" or scaling.get("mixed_b") is not None):
        return f"rope_scaling {scaling!r} (only fixed ntk)"
    return None


def native_gte(auto_class: Any, weights_dir: Path) -> NativeGte | None:
    """How to load `weights_dir` natively for `auto_class`, or None when it is not a "new" folder,
    the auto class has no native counterpart, or the config is one the native classes cannot run."""
    class_name = _NATIVE_CLASSES.get(getattr(auto_class, "__name__", ""))
    raw = read_config(weights_dir)
    if class_name is None or raw is None or unsupported(raw) is not None:
        return None
    import transformers  # deferred: importing transformers is slow

    settings = {**_DEFAULTS, **raw}
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
