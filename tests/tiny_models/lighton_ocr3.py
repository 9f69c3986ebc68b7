"""A tiny random LightOnOCR-3 (transformers' Qwen3_5ForConditionalGeneration: a Qwen3.5 vision tower
and a hybrid decoder of Gated DeltaNet and attention layers with 3D rotary positions) with a
byte-level BPE tokenizer, a Qwen-style chat template that honours `enable_thinking`, and
Qwen2VLImageProcessor's settings in preprocessor_config.json, plus the reference: transformers'
Qwen3VLProcessor (with the PIL image processor) and `generate`, one page at a time, as SIE's
transformers adapter runs it (greedy here, the limit of its sampling at a vanishing temperature).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tiny_models import page_ocr
from tests.tiny_models.page_ocr import (
    QWEN_SPECIALS,
    QWEN_TOKENIZER,
    PageReference,
    images_only,
    model_yaml_page_ocr,
    processor_settings,
    save_generator,
    sharpen,
)

SPECIALS = [*QWEN_SPECIALS, "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)
# 1 to 16 tokens of 32 x 32 (Qwen2-VL's rule: sides rounded to whole tokens, no other upscaling).
MIN_PIXELS, MAX_PIXELS = 32 * 32, 128 * 128
PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen3VLProcessor",
    "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
_CORPUS = [
    "# Invoice 2024-118\n\n| item | qty | price |\n|---|---|---|\n| paper | 3 | 4.50 |",
    "grounding ![text](120,40,880,96) ![table](100,120,900,640)",
    "$$ E = mc^2 $$ and the sum of the first n integers, n(n+1)/2.",
]


def write_tokenizer(folder: Path) -> Any:
    return page_ocr.write_tokenizer(folder, _CORPUS, SPECIALS, QWEN_TOKENIZER, CHAT_TEMPLATE, 400)


def make_lighton_ocr3(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIALS}
    config = transformers.Qwen3_5Config(
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 32,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "num_position_embeddings": 64,
        },
        text_config={
            "vocab_size": tokenizer.get_vocab_size(),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 4,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 2,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            "max_position_embeddings": 2048,
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"],
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
                "partial_rotary_factor": 0.5,
            },
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen3_5ForConditionalGeneration(config).eval()
    sharpen(model, list(ids.values()))
    save_generator(model, folder, ids["<|im_end|>"], ids["<|endoftext|>"])
    return folder


class Reference(PageReference):
    """transformers' Qwen3VLProcessor (PIL Qwen2-VL image processor) and greedy `generate`, one page
    per call, the chat template without thinking."""

    template_kwargs = {"enable_thinking": False}

    def __init__(self, folder: Path) -> None:
        import transformers
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        self.processor = images_only(transformers.Qwen3VLProcessor)(
            image_processor=Qwen2VLImageProcessorPil(**processor_settings(PROCESSOR)),
            tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
            chat_template=CHAT_TEMPLATE,
        )
        self.model = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(folder).eval()


def model_yaml_lighton_ocr3(sie_id: str, folder: Path, **runtime: Any) -> dict[str, Any]:
    return model_yaml_page_ocr("lighton_ocr3", sie_id, folder, max_sequence_length=24576, **runtime)
