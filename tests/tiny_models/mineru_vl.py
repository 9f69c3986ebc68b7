"""A tiny random MinerU2.5 (transformers' Qwen2VLForConditionalGeneration: a Qwen2-VL vision tower and
a Qwen2 decoder with 3D rotary positions) with a byte-level BPE tokenizer, Qwen2-VL's chat template
(its default system turn included) and Qwen2VLImageProcessor's settings in preprocessor_config.json,
plus the reference: transformers' Qwen2VLProcessor (with the PIL image processor) and greedy
`generate` with no 100-token verbatim repeat, one page at a time, as SIE's adapter runs it.
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

SPECIALS = QWEN_SPECIALS
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message.role != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message.role }}\n{% if message.content is string %}{{ message.content }}"
    "{% else %}{% for part in message.content %}"
    "{% if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# 1 to 16 tokens of 28 x 28, in the older min_pixels / max_pixels keys.
MIN_PIXELS, MAX_PIXELS = 28 * 28, 112 * 112
PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "processor_class": "Qwen2VLProcessor",
    "min_pixels": MIN_PIXELS,
    "max_pixels": MAX_PIXELS,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}
_CORPUS = [
    "# Invoice 2024-118\n\n| item | qty | price |\n|---|---|---|\n| paper | 3 | 4.50 |",
    "Text Recognition: Table Recognition: Formula Recognition: Image Analysis: Layout Detection:",
    "$$ E = mc^2 $$ and the sum of the first n integers, n(n+1)/2.",
]


def write_tokenizer(folder: Path) -> Any:
    return page_ocr.write_tokenizer(folder, _CORPUS, SPECIALS, QWEN_TOKENIZER, CHAT_TEMPLATE, 400)


def make_mineru_vl(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIALS}
    config = transformers.Qwen2VLConfig(
        vision_config={
            "depth": 1,
            "embed_dim": 32,
            "hidden_size": 32,
            "mlp_ratio": 2,
            "num_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
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
            "bos_token_id": None,
            "eos_token_id": ids["<|im_end|>"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2VLForConditionalGeneration(config).eval()
    sharpen(model, list(ids.values()))
    save_generator(model, folder, ids["<|im_end|>"], ids["<|endoftext|>"])
    return folder


class Reference(PageReference):
    """transformers' Qwen2VLProcessor (PIL image processor) and greedy `generate` that never repeats
    a 100-token run verbatim (pass no_repeat_ngram_size=None to lift it), one page per call."""

    default_text = "\nText Recognition:"
    generate_kwargs = {"no_repeat_ngram_size": 100}

    def __init__(self, folder: Path) -> None:
        import transformers
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        self.processor = images_only(transformers.Qwen2VLProcessor)(
            image_processor=Qwen2VLImageProcessorPil(**processor_settings(PROCESSOR)),
            tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
            chat_template=CHAT_TEMPLATE,
        )
        self.model = transformers.Qwen2VLForConditionalGeneration.from_pretrained(folder).eval()


def model_yaml_mineru_vl(sie_id: str, folder: Path, **runtime: Any) -> dict[str, Any]:
    return model_yaml_page_ocr("mineru_vl", sie_id, folder, **runtime)
