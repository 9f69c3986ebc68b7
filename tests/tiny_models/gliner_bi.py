"""A tiny random-weight GLiNER bi-encoder (span mode), built offline with MiniLM's real tokenizer.

Published bi-encoders (knowledgator/gliner-bi-*) pair a text encoder (Ettin / ModernBERT) with a
sentence-embedding labels encoder (bge, MiniLM) named by hub id in `labels_encoder`. Here both
encoders are tiny; the labels tokenizer is saved in `labels_tokenizer/` as gliner 0.2.29 saves it,
and `labels_encoder` is rewritten to a hub id afterwards, as the published configs have it.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
MAX_WIDTH = 4
MAX_LEN = 40  # words per text: small, so tests reach gliner's cut
LABELS_ENCODER_ID = "BAAI/bge-small-en-v1.5"  # what the saved config names, as published ones do
ENCODER: dict[str, Any] = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}
MODERNBERT_EXTRA: dict[str, Any] = {
    "pad_token_id": 0,
    "bos_token_id": 101,
    "eos_token_id": 102,
    "cls_token_id": 101,
    "sep_token_id": 102,
    "global_attn_every_n_layers": 2,
    "local_attention": 16,  # smaller than the longest test text, so the sliding window is used
    "initializer_range": 0.3,
}
LABELS_HIDDEN = 24  # differs from the model's hidden size: the labels projection is exercised
CALIBRATION_TEXT = "John Smith lives in New York and works at Springfield Elementary School since 2004."
CALIBRATION_LABELS = ["person", "location", "organization", "date"]
SPAN_SCALE = 12.0
PROMPT_STD = 1.0


def make_gliner_bi(folder: Path, seed: int = 0, arch: str = "modernbert", post_fusion: str = "") -> Path:
    """Write gliner_config.json, model.safetensors, the text tokenizer and labels_tokenizer/.

    `arch` is the text encoder ("modernbert", as Ettin, or "bert"); `post_fusion` gliner's
    `post_fusion_schema` (e.g. "l2l-l2t-t2t": cross-attention between words and labels).
    """
    import torch
    from gliner import GLiNER, GLiNERConfig
    from transformers import BertConfig

    from tests.integration.reference import minilm_dir

    folder.mkdir(parents=True, exist_ok=True)
    labels_dir = folder / "labels_tokenizer"
    labels_dir.mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, folder / name)
        shutil.copy(minilm_dir() / name, labels_dir / name)
    config = GLiNERConfig(
        model_name=str(folder),  # the text tokenizer's source; the encoder comes from encoder_config
        encoder_config=_encoder_config(arch),
        labels_encoder=str(labels_dir),
        labels_encoder_config=BertConfig(**{**ENCODER, "hidden_size": LABELS_HIDDEN}),
        hidden_size=32,
        max_width=MAX_WIDTH,
        max_len=MAX_LEN,
        dropout=0.0,
        span_mode="markerV0",
        post_fusion_schema=post_fusion,
    )
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Resizing embeddings is not supported")
        model = GLiNER.from_config(config, backbone_from_pretrained=False, local_files_only=True)
    _spread_scores(model)
    model.save_pretrained(folder, safe_serialization=True)
    saved = json.loads((folder / "gliner_config.json").read_text())
    saved["labels_encoder"] = LABELS_ENCODER_ID
    (folder / "gliner_config.json").write_text(json.dumps(saved, indent=2))
    return folder


def model_yaml_gliner_bi(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "max_sequence_length": ENCODER["max_position_embeddings"],
        "adapter": "gliner_bi",
    }


def _encoder_config(arch: str) -> dict[str, Any]:
    if arch == "bert":
        return {"model_type": "bert", **ENCODER}
    if arch == "modernbert":
        return {"model_type": "modernbert", **ENCODER, **MODERNBERT_EXTRA}
    raise ValueError(arch)


def _spread_scores(model: Any) -> None:
    """Make the random model's span scores vary by span and by label (as tests.tiny_models.gliner
    does): centre and widen the span vectors, redraw the label projection around the labels' mean."""
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
