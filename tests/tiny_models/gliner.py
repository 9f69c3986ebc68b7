"""A tiny random-weight GLiNER (uni-encoder, span mode) with MiniLM's real tokenizer, built offline.

The `gliner` package builds the model from a config object (encoder config inline, tokenizer from
the folder itself, so nothing is fetched) and saves it the way published GLiNER models are saved:
gliner_config.json, model.safetensors, and the tokenizer with GLiNER's added marker tokens.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_WIDTH = 4
MAX_LEN = 40  # words per text: small, so tests reach gliner's cut
ENCODER: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}
DEBERTA_EXTRA: dict[str, Any] = {"position_biased_input": False, "initializer_range": 0.3}
# Calibration (see `_spread_scores`): how far span and label vectors are spread around their means.
SPAN_SCALE = 12.0
PROMPT_STD = 1.0
CALIBRATION_TEXT = "John Smith lives in New York and works at Springfield Elementary School since 2004."
CALIBRATION_LABELS = ["person", "location", "organization", "date"]


def make_gliner(folder: Path, seed: int = 0, arch: str = "bert") -> Path:
    """Write gliner_config.json, model.safetensors and the tokenizer into `folder`; return it.

    `arch` picks the encoder: "bert" or "deberta" (DeBERTa-v2, what published GLiNERs use).
    """
    import torch
    from gliner import GLiNER, GLiNERConfig

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
    config = GLiNERConfig(
        model_name=str(folder),  # the tokenizer's source; the encoder comes from encoder_config
        encoder_config=_encoder_config(arch),
        hidden_size=32,
        max_width=MAX_WIDTH,
        max_len=MAX_LEN,
        dropout=0.0,
        span_mode="markerV0",
    )
    torch.manual_seed(seed)
    model = GLiNER.from_config(config, backbone_from_pretrained=False, local_files_only=True)
    _spread_scores(model)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def model_yaml_gliner(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": ENCODER["max_position_embeddings"],
        "adapter": "gliner",
    }


def _encoder_config(arch: str) -> dict[str, Any]:
    if arch == "bert":
        return {"model_type": "bert", **ENCODER}
    if arch == "deberta":
        # No absolute positions, so with the default init (std 0.02) attention is near uniform and
        # every <<ENT>> token comes out alike; a wider init lets each take in its own label.
        relative = {"relative_attention": True, "position_buckets": 32, "pos_att_type": ["p2c", "c2p"]}
        return {"model_type": "deberta-v2", **ENCODER, **relative, **DEBERTA_EXTRA}
    raise ValueError(arch)


def _spread_scores(model: Any) -> None:
    """Make the random model's span scores vary by span and by label.

    With the default init every span vector points along one shared direction and every label
    vector along another, so each label scores all spans alike (p = 0.5 +- 0.01, or one label
    winning everywhere). Centring the span vectors (measured on one sentence) and drawing the label
    projection afresh around the labels' mean removes both shared parts.
    """
    import torch

    captured: dict[str, torch.Tensor] = {}
    span_out = model.model.span_rep_layer.span_rep_layer.out_project[-1]
    label_out = model.model.prompt_rep_layer[-1]
    hooks = [
        span_out.register_forward_hook(lambda _m, _i, out: captured.__setitem__("spans", out)),
        label_out.register_forward_hook(lambda _m, inp, _o: captured.__setitem__("labels", inp[0])),
    ]
    model.predict_entities(CALIBRATION_TEXT, CALIBRATION_LABELS)
    for hook in hooks:
        hook.remove()
    spans = captured["spans"].reshape(-1, captured["spans"].shape[-1])
    labels = captured["labels"].reshape(-1, captured["labels"].shape[-1])
    with torch.no_grad():
        span_out.bias.sub_(spans.mean(0)).mul_(SPAN_SCALE)
        span_out.weight.mul_(SPAN_SCALE)
        label_out.weight.normal_(0.0, PROMPT_STD)
        label_out.bias.copy_(-label_out.weight @ labels.mean(0))
