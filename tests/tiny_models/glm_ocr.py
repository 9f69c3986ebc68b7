"""A tiny random GLM-OCR (transformers' GlmOcrForConditionalGeneration: a CogViT vision tower and a
GLM decoder with 3D rotary positions) with a byte-level BPE tokenizer, a GLM-style chat template in
chat_template.jinja and Glm46VImageProcessor's settings in preprocessor_config.json, plus the
reference: transformers' Glm46VProcessor (with the PIL image processor) and `generate`, one page at
a time, as SIE's transformers adapter runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tiny_models import page_ocr
from tests.tiny_models.page_ocr import (
    PageReference,
    images_only,
    model_yaml_page_ocr,
    processor_settings,
    save_generator,
    sharpen,
)

SPECIALS = [
    "<|endoftext|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|video|>",
]
CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for message in messages %}<|{{ message.role }}|>\n"
    "{% if message.content is string %}{{ message.content }}{% else %}"
    "{% for part in message.content %}"
    "{% if part.type == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Pixel counts, which count a still page twice (the temporal patch): 1 to 16 tokens of 28 x 28.
MIN_PIXELS, MAX_PIXELS = 2 * 28 * 28, 2 * 112 * 112
PROCESSOR = {
    "image_processor_type": "Glm46VImageProcessor",
    "processor_class": "Glm46VProcessor",
    "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
    "do_rescale": True,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
_CORPUS = [
    "# Invoice 2024-118\n\n| item | qty | price |\n|---|---|---|\n| paper | 3 | 4.50 |",
    "Text Recognition: Table Recognition: Formula Recognition:",
    "$$ E = mc^2 $$ and the sum of the first n integers, n(n+1)/2.",
]


def write_tokenizer(folder: Path) -> Any:
    return page_ocr.write_tokenizer(
        folder,
        _CORPUS,
        SPECIALS,
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        CHAT_TEMPLATE,
        500,
    )


def make_glm_ocr(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIALS}
    eos = [ids["<|endoftext|>"], ids["<|user|>"]]
    config = transformers.GlmOcrConfig(
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": 32,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "image_size": 112,
        },
        text_config={
            "vocab_size": tokenizer.get_vocab_size(),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 2048,
            "pad_token_id": ids["<|endoftext|>"],
            "eos_token_id": eos,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [2, 1, 1],
                "partial_rotary_factor": 0.5,
            },
        },
        image_token_id=ids["<|image|>"],
        video_token_id=ids["<|video|>"],
        image_start_token_id=ids["<|begin_of_image|>"],
        image_end_token_id=ids["<|end_of_image|>"],
        video_start_token_id=ids["<|begin_of_video|>"],
        video_end_token_id=ids["<|end_of_video|>"],
    )
    torch.manual_seed(seed)
    model = transformers.GlmOcrForConditionalGeneration(config).eval()
    sharpen(model, list(ids.values()), layer_scale=None)
    with torch.no_grad():
        model.model.visual.merger.proj.weight.mul_(30.0)  # the page steers every token
    save_generator(model, folder, eos, ids["<|endoftext|>"])
    return folder


class Reference(PageReference):
    """transformers' Glm46VProcessor (PIL image processor) and `generate`, one page per call."""

    default_text = "Text Recognition:"

    def __init__(self, folder: Path) -> None:
        import transformers
        from transformers.models.glm46v.image_processing_pil_glm46v import Glm46VImageProcessorPil

        self.processor = images_only(transformers.Glm46VProcessor)(
            image_processor=Glm46VImageProcessorPil(**processor_settings(PROCESSOR)),
            tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
            chat_template=CHAT_TEMPLATE,
        )
        self.model = transformers.GlmOcrForConditionalGeneration.from_pretrained(folder).eval()


def model_yaml_glm_ocr(sie_id: str, folder: Path, **runtime: Any) -> dict[str, Any]:
    return model_yaml_page_ocr("glm_ocr", sie_id, folder, **runtime)
