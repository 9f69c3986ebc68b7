"""A tiny random PaddleOCR-VL (transformers' PaddleOCRVLForConditionalGeneration: a NaViT SigLIP
vision tower and an ERNIE-4.5 decoder with 3D rotary positions) with a byte-level BPE tokenizer, a
PaddleOCR-style chat template in chat_template.jinja and PaddleOCRVLImageProcessor's settings (its
older min_pixels / max_pixels keys) in preprocessor_config.json, plus the reference: transformers'
PaddleOCRVLProcessor (with the PIL image processor) and `generate`, one page at a time, as SIE's
transformers adapter runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tiny_models import page_ocr
from tests.tiny_models.page_ocr import (
    PageReference,
    model_yaml_page_ocr,
    processor_settings,
    save_generator,
    sharpen,
)

SPECIALS = [
    "<unk>",
    "<s>",
    "</s>",
    "<|begin_of_sentence|>",
    "<|end_of_sentence|>",
    "<|IMAGE_START|>",
    "<|IMAGE_END|>",
    "<|IMAGE_PLACEHOLDER|>",
    "<|video_pad|>",
]
CHAT_TEMPLATE = (
    "<|begin_of_sentence|>{% for message in messages %}"
    "{% if message.role == 'user' %}User: {% for part in message.content %}"
    "{% if part.type == 'image' %}<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}\n"
    "{% else %}{{ message.role }}: {{ message.content }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)
# 1 to 16 tokens of 28 x 28.
MIN_PIXELS, MAX_PIXELS = 28 * 28, 112 * 112
PROCESSOR = {
    "image_processor_type": "PaddleOCRVLImageProcessor",
    "processor_class": "PaddleOCRVLProcessor",
    "min_pixels": MIN_PIXELS,
    "max_pixels": MAX_PIXELS,
    "do_rescale": True,
    "patch_size": 14,
    "temporal_patch_size": 1,
    "merge_size": 2,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
_CORPUS = [
    "# Invoice 2024-118\n\n| item | qty | price |\n|---|---|---|\n| paper | 3 | 4.50 |",
    "OCR: Table Recognition: Formula Recognition: Chart Recognition: Spotting: Seal Recognition:",
    "$$ E = mc^2 $$ and the sum of the first n integers, n(n+1)/2.",
]


def write_tokenizer(folder: Path) -> Any:
    return page_ocr.write_tokenizer(
        folder,
        _CORPUS,
        SPECIALS,
        {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<unk>",
            "unk_token": "<unk>",
            "extra_special_tokens": {"image_token": "<|IMAGE_PLACEHOLDER|>"},
        },
        CHAT_TEMPLATE,
        500,
    )


def make_paddleocr_vl(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps(PROCESSOR))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIALS}
    eos = ids["</s>"]
    config = transformers.PaddleOCRVLConfig(
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "patch_size": 14,
            "spatial_merge_size": 2,
            "image_size": 112,
        },
        text_config={
            "vocab_size": tokenizer.get_vocab_size(),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 2048,
            "pad_token_id": ids["<unk>"],
            "bos_token_id": ids["<s>"],
            "eos_token_id": eos,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
            "tie_word_embeddings": False,
        },
        image_token_id=ids["<|IMAGE_PLACEHOLDER|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|IMAGE_START|>"],
        vision_end_token_id=ids["<|IMAGE_END|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.PaddleOCRVLForConditionalGeneration(config).eval()
    sharpen(model, list(ids.values()))
    with torch.no_grad():
        for weight in model.model.projector.parameters():  # the page steers every token
            weight.mul_(5.0)
    # save_pretrained writes the weights under the Hub's remote-code names (mlp_AR., visual., model.)
    save_generator(model, folder, eos, ids["<unk>"])
    _flatten_config(folder / "config.json")
    return folder


def _flatten_config(path: Path) -> None:
    """config.json in the Hub's remote-code layout: the text settings at the top, rope settings as
    `rope_scaling`, the vision config under its old model type, and the remote code's auto_map."""
    config = json.loads(path.read_text())
    text = config.pop("text_config")
    rope = text.pop("rope_parameters")
    text.pop("model_type", None)
    config.update(text)
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = {**rope, "type": rope["rope_type"]}
    config["vision_config"]["model_type"] = "paddleocr_vl"
    config["use_3d_rope"] = True
    config["auto_map"] = {
        "AutoConfig": "configuration_paddleocr_vl.PaddleOCRVLConfig",
        "AutoModel": "modeling_paddleocr_vl.PaddleOCRVLForConditionalGeneration",
        "AutoModelForCausalLM": "modeling_paddleocr_vl.PaddleOCRVLForConditionalGeneration",
    }
    path.write_text(json.dumps(config, indent=2))


class Reference(PageReference):
    """transformers' PaddleOCRVLProcessor (PIL image processor) and `generate`, one page per call."""

    default_text = "OCR:"

    def __init__(self, folder: Path) -> None:
        import transformers
        from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
            PaddleOCRVLImageProcessorPil,
        )

        self.processor = transformers.PaddleOCRVLProcessor(
            image_processor=PaddleOCRVLImageProcessorPil(**processor_settings(PROCESSOR)),
            tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
            chat_template=CHAT_TEMPLATE,
        )
        self.model = transformers.PaddleOCRVLForConditionalGeneration.from_pretrained(folder).eval()


def model_yaml_paddleocr_vl(sie_id: str, folder: Path, **runtime: Any) -> dict[str, Any]:
    return model_yaml_page_ocr("paddleocr_vl", sie_id, folder, **runtime)
