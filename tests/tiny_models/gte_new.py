"""Tiny random-weight GTE checkpoints in Alibaba's `model_type: new` layout, built offline.

The weights come from a transformers GTE model (returned as the reference); the folder holds them
under new-impl's names and shapes: `new.` before the encoder of a masked LM, `encoder.layer.N`,
one packed `attention.qkv_proj` (query, key, value rows in that order), one `mlp.up_gate_proj`
(up rows, then gate rows), `attn_ln` / `mlp_ln`, and the masked-LM head's `lm_head.norm`; the
config.json carries new-impl's keys and its `auto_map` into Alibaba-NLP/new-impl.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

VOCAB_SIZE = 512
HIDDEN = 64
HEADS = 4
THETA = 500000.0
AUTO_MAP = {
    "AutoConfig": "Alibaba-NLP/new-impl--configuration.NewConfig",
    "AutoModel": "Alibaba-NLP/new-impl--modeling.NewModel",
    "AutoModelForMaskedLM": "Alibaba-NLP/new-impl--modeling.NewForMaskedLM",
}


def make_gte_new(
    folder: Path, *, masked_lm: bool, ntk_factor: float | None = None, type_vocab_size: int = 0, seed: int = 0
) -> Any:
    """Write the checkpoint into `folder`; return the transformers model it was made from, with the
    rotary frequencies new-impl computes for it (fixed NTK when `ntk_factor` is set)."""
    import transformers

    config = transformers.GteConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        intermediate_size=96,
        max_position_embeddings=256,
        type_vocab_size=type_vocab_size,
        pad_token_id=0,
        rope_parameters={"rope_type": "default", "rope_theta": THETA},
    )
    torch.manual_seed(seed)
    model_class = transformers.GteForMaskedLM if masked_lm else transformers.GteModel
    model = model_class(config).eval()
    with torch.no_grad():  # the default init leaves biases at 0 and norms at 1: make every weight count
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    if ntk_factor is not None:
        _write_ntk(model, ntk_factor)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(_new_layout(model, masked_lm), str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(_new_config(masked_lm, ntk_factor, type_vocab_size)))
    return model


def _write_ntk(model: Any, factor: float) -> None:
    """new-impl's fixed NTK, as its rotary module computes it: base theta * k, then every inverse
    frequency divided by k ** (2 / head_dim)."""
    head_dim = HIDDEN // HEADS
    base = THETA * factor
    inverse = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    inverse = inverse / factor ** (2 / head_dim)
    model.base_model.rotary_emb.inv_freq.copy_(inverse)


def _new_layout(model: Any, masked_lm: bool) -> dict[str, torch.Tensor]:
    base = model.base_model
    prefix = "new." if masked_lm else ""
    tensors = {f"{prefix}embeddings.{name}": t for name, t in base.embeddings.state_dict().items()}
    for i, layer in enumerate(base.layers):
        out = f"{prefix}encoder.layer.{i}."
        attention = layer.self_attn
        for kind in ("weight", "bias"):
            parts = [getattr(getattr(attention, f"{p}_proj"), kind) for p in "qkv"]
            tensors[out + f"attention.qkv_proj.{kind}"] = torch.cat(parts)
            tensors[out + f"attention.o_proj.{kind}"] = getattr(attention.o_proj, kind)
            tensors[out + f"attn_ln.{kind}"] = getattr(layer.post_attention_layernorm, kind)
            tensors[out + f"mlp_ln.{kind}"] = getattr(layer.post_mlp_layernorm, kind)
            tensors[out + f"mlp.down_proj.{kind}"] = getattr(layer.mlp.down_proj, kind)
        tensors[out + "mlp.up_gate_proj.weight"] = torch.cat(
            [layer.mlp.up_proj.weight, layer.mlp.gate_proj.weight]
        )
    if masked_lm:
        head = model.lm_head
        for kind in ("weight", "bias"):
            tensors[f"lm_head.dense.{kind}"] = getattr(head.dense, kind)
            tensors[f"lm_head.norm.{kind}"] = getattr(head.layer_norm, kind)
            tensors[f"lm_head.decoder.{kind}"] = getattr(head.decoder, kind)
    return {name: t.detach().clone().contiguous() for name, t in tensors.items()}


def _new_config(masked_lm: bool, ntk_factor: float | None, type_vocab_size: int) -> dict[str, Any]:
    return {
        "architectures": ["NewForMaskedLM" if masked_lm else "NewModel"],
        "model_type": "new",
        "auto_map": AUTO_MAP,
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN,
        "num_hidden_layers": 2,
        "num_attention_heads": HEADS,
        "intermediate_size": 96,
        "hidden_act": "gelu",
        "max_position_embeddings": 256,
        "type_vocab_size": type_vocab_size,
        "layer_norm_eps": 1e-12,
        "layer_norm_type": "layer_norm",
        "position_embedding_type": "rope",
        "rope_theta": THETA,
        "rope_scaling": {"type": "ntk", "factor": ntk_factor} if ntk_factor is not None else None,
        "pack_qkv": True,
        "unpad_inputs": False,
        "use_memory_efficient_attention": False,
        "logn_attention_scale": False,
        "logn_attention_clip1": False,
        "pad_token_id": 0,
    }
