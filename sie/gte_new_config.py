"""Alibaba's GTE checkpoints of `model_type: new` (gte-multilingual-base, the gte-*-en-v1.5 line,
OpenSearch's doc-v3-gte): which of them transformers' own GTE classes compute (no torch here; the
loading is sie.gpu_proc.adapters.gte_new).

Those folders name their code in `auto_map` (the Alibaba-NLP/new-impl repository), which a box
without the Hub cannot fetch and which `trust_remote_code` would run. transformers ships the same
architecture as `GteModel` / `GteForMaskedLM` (post-norm layers, rotary positions, a gated MLP, a
packed QKV projection that its weight conversion splits on load). What they cannot express is
refused here, and the folder's own code runs where the model's YAML trusts it: absolute positions,
RMSNorm layers, log-n attention scaling, unpacked QKV weights, another activation than GELU (the
native masked-LM head always applies GELU), or a rotary scaling other than fixed NTK.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MODEL_TYPE = "new"
# new-impl's NewConfig defaults, for keys a config.json leaves out.
DEFAULTS: dict[str, Any] = {
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


def read_config(weights_dir: Path) -> dict[str, Any] | None:
    """config.json of a "new" folder, or None for any other folder."""
    try:
        raw = json.loads((weights_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) and raw.get("model_type") == MODEL_TYPE else None


def unsupported(raw: dict[str, Any]) -> str | None:
    """Why the native GTE classes cannot compute what this "new" config describes, or None."""
    settings = with_defaults(raw)
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


def with_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """A "new" config.json with new-impl's defaults filled in."""
    return {**DEFAULTS, **raw}


def loads_natively(weights_dir: Path) -> bool:
    """A "new" folder that transformers' GTE classes compute, so that its code is not needed."""
    raw = read_config(weights_dir)
    return raw is not None and unsupported(raw) is None
