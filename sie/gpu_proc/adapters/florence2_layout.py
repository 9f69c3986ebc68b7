"""microsoft/Florence-2-* folders as transformers' native `Florence2ForConditionalGeneration` reads them.

Those checkpoints are written for their own remote code: a `davit` vision config, other module
names, `image_projection` stored as an [in, out] matrix, a BART `final_logits_bias`, and the
generation rules in `text_config` (its language model generates with them: no_repeat_ngram_size 3,
a forced BOS). transformers' converted folders (florence-community) need none of this. Here the
config is translated, each weight renamed, and the generation rules kept, so the native class
computes what the remote code does (the same modules; only the names differ).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# What the remote code's Florence2ForConditionalGeneration supports, and the native class assumes.
_FEATURE_SOURCE = ["spatial_avg_pool", "temporal_avg_pool"]
# text_config keys the remote language model's `generate` honours (GenerationConfig.from_model_config):
# the token ids, which the native BART config keeps too, and the decoding rules, which it drops.
_TOKEN_KEYS = (
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "decoder_start_token_id",
    "forced_eos_token_id",
)
_RULE_KEYS = (
    "forced_bos_token_id",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "repetition_penalty",
    "length_penalty",
    "early_stopping",
    "min_length",
    "num_beams",
)
_NOT_MODEL_KEYS = ("output_attentions", "output_hidden_states", "torchscript", "return_dict")
# Original name -> native name, first match wins; the vision blocks' inner names follow them.
_RENAMES = [
    (r"^vision_tower\.convs\.(\d+)\.proj\.", r"model.vision_tower.convs.\1.conv."),
    (r"^vision_tower\.convs\.(\d+)\.norm\.", r"model.vision_tower.convs.\1.norm."),
    (r"^vision_tower\.blocks\.(\d+)\.(\d+)\.", r"model.vision_tower.blocks.\1.\2."),
    (r"^image_projection$", "model.multi_modal_projector.image_projection.weight"),
    (r"^image_proj_norm\.", "model.multi_modal_projector.image_proj_norm."),
    (r"^image_pos_embed\.", "model.multi_modal_projector.image_position_embed."),
    (r"^visual_temporal_embed\.", "model.multi_modal_projector.visual_temporal_embed."),
    (r"^language_model\.model\.", "model.language_model."),
    (r"^language_model\.lm_head\.", "lm_head."),
]  # fmt: skip
_BLOCK_PARTS = [
    (r"\.conv([12])\.fn\.dw\.", r".conv\1."),
    (r"\.(window_attn|channel_attn)\.norm\.", ".norm1."),
    (r"\.(window_attn|channel_attn)\.fn\.", r".\1."),
    (r"\.ffn\.norm\.", ".norm2."),
    (r"\.ffn\.fn\.net\.", ".ffn."),
]
_BIAS = "language_model.final_logits_bias"


class UnsupportedLayout(ValueError):
    """A Florence-2 folder this server cannot read as the native model."""


def is_original_layout(raw: Mapping[str, Any]) -> bool:
    """microsoft's remote-code layout (its vision config is a `davit`); else transformers' own."""
    vision = raw.get("vision_config") or {}
    return isinstance(vision, dict) and vision.get("model_type") == "davit"


def native_config(raw: Mapping[str, Any]) -> Any:
    """The native Florence2Config of an original config.json."""
    from transformers import Florence2Config

    vision = dict(raw["vision_config"])
    temporal = vision.get("visual_temporal_embedding") or {}
    positions = vision.get("image_pos_embed") or {}
    if temporal.get("type") != "COSINE" or positions.get("type") != "learned_abs_2d":
        raise UnsupportedLayout(
            "Florence-2 vision embeddings other than COSINE / learned_abs_2d are not served"
        )
    if list(vision.get("image_feature_source") or []) != _FEATURE_SOURCE:
        raise UnsupportedLayout(f"Florence-2 image features other than {_FEATURE_SOURCE} are not served")
    text = {k: v for k, v in dict(raw["text_config"]).items() if k not in (*_RULE_KEYS, *_NOT_MODEL_KEYS)}
    text["model_type"] = "bart"  # a saved remote config names its own ("florence2_language")
    return Florence2Config(
        vision_config={
            "embed_dim": vision["dim_embed"],
            "depths": vision["depths"],
            "num_heads": vision["num_heads"],
            "num_groups": vision["num_groups"],
            "window_size": vision["window_size"],
            "patch_size": vision["patch_size"],
            "patch_stride": vision["patch_stride"],
            "patch_padding": vision["patch_padding"],
            "patch_prenorm": vision["patch_prenorm"],
            "projection_dim": vision["projection_dim"],
            "drop_path_rate": 0.0,  # inference: stochastic depth is off either way
            "max_temporal_embeddings": temporal["max_temporal_embeddings"],
            "max_position_embeddings": positions["max_pos_embeddings"],
        },
        text_config=text,
        # The native model finds image features at this token; the adapter joins them itself, so
        # it only has to be an id no prompt carries.
        image_token_id=int(text["vocab_size"]),
    )


def generation_settings(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The decoding rules the remote code's language model generates with (from `text_config`)."""
    text = raw.get("text_config") or {}
    return {key: text[key] for key in (*_TOKEN_KEYS, *_RULE_KEYS) if key in text}


def native_name(original: str) -> str:
    for pattern, replacement in _RENAMES:
        if re.search(pattern, original):
            name = re.sub(pattern, replacement, original, count=1)
            if ".vision_tower.blocks." in name:
                for part, native in _BLOCK_PARTS:
                    name = re.sub(part, native, name, count=1)
            return name
    raise UnsupportedLayout(f"unexpected weight '{original}' in a Florence-2 checkpoint")


def native_state_dict(original: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors under native names; its (zero) final logits bias dropped."""
    state: dict[str, torch.Tensor] = {}
    for key, tensor in original.items():
        if key == _BIAS:
            if bool(tensor.any()):  # the native head has no bias: a non-zero one would change logits
                raise UnsupportedLayout("a Florence-2 checkpoint with a non-zero final_logits_bias")
            continue
        state[native_name(key)] = tensor.t().contiguous() if key == "image_projection" else tensor
    return state
