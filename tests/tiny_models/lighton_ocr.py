"""A tiny random LightOnOCR (transformers' LightOnOcrForConditionalGeneration: a Pixtral vision tower
and a Qwen3 decoder) with a byte-level BPE tokenizer, a Qwen-style chat template and Pixtral's image
processor settings, plus the reference: transformers' LightOnOcrProcessor (with the PIL Pixtral
image processor) and `generate`, one page at a time, as SIE's transformers adapter runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tiny_models.bpe import byte_level_bpe

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>", "[IMG_BREAK]", "[IMG_END]"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% if message.content is string %}{{ message.content }}{% else %}"
    "{% for part in message.content %}{% if part.type == 'image' %}<|image_pad|>"
    "{% elif part.type == 'text' %}{{ part.text }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
LONGEST_EDGE = 112
PROCESSOR = {
    "image_processor_type": "PixtralImageProcessor",
    "size": {"longest_edge": LONGEST_EDGE},
    "patch_size": 14,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "rescale_factor": 1 / 255,
    "resample": 3,
    "do_resize": True,
    "do_rescale": True,
    "do_normalize": True,
    "do_pad": True,
    "do_convert_rgb": True,
}
_CORPUS = [
    "# Invoice 2024-118\n\n| item | qty | price |\n|---|---|---|\n| paper | 3 | 4.50 |",
    "Dear Ms. Martin, thank you for your letter of 12 March.",
    "## Results\n\nThe model reads each page at its own aspect ratio.",
]


def write_tokenizer(folder: Path) -> Any:
    tokenizer = byte_level_bpe(_CORPUS, SPECIALS, vocab_size=500)
    tokenizer.save(str(folder / "tokenizer.json"))
    settings = {
        "tokenizer_class": "TokenizersBackend",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 16384,
        "chat_template": CHAT_TEMPLATE,
        "extra_special_tokens": {
            "image_token": "<|image_pad|>",
            "image_break_token": "[IMG_BREAK]",
            "image_end_token": "[IMG_END]",
        },
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return tokenizer


def make_lighton_ocr(folder: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    # The Hub repository's layout: processor_config.json with the image processor's settings inside.
    processor = {"image_processor": PROCESSOR, "patch_size": 14, "spatial_merge_size": 2}
    (folder / "processor_config.json").write_text(
        json.dumps({**processor, "processor_class": "LightOnOcrProcessor"})
    )
    pad, eos = tokenizer.token_to_id("<|endoftext|>"), tokenizer.token_to_id("<|im_end|>")
    config = transformers.LightOnOcrConfig(
        vision_config={
            "model_type": "pixtral",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "head_dim": 16,
            "patch_size": 14,
            "image_size": LONGEST_EDGE,
        },
        text_config={
            "model_type": "qwen3",
            "vocab_size": tokenizer.get_vocab_size(),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 2048,
            "pad_token_id": pad,
            "eos_token_id": eos,
            "bos_token_id": None,
        },
        image_token_id=tokenizer.token_to_id("<|image_pad|>"),
        spatial_merge_size=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = transformers.LightOnOcrForConditionalGeneration(config).eval()
    with torch.no_grad():  # peaked next-token distributions (no near-ties to flip), text before EOS
        head = model.get_output_embeddings().weight
        head.normal_(0.0, 1.0)
        head[[tokenizer.token_to_id(token) for token in SPECIALS]] *= 0.05
        model.model.vision_projection.linear_2.weight.mul_(30.0)  # the page steers every token
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    model.save_pretrained(folder)
    return folder


class Reference:
    """transformers' processor and `generate`, one page per call."""

    def __init__(self, folder: Path, system: str) -> None:
        import transformers
        from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

        settings = {k: v for k, v in PROCESSOR.items() if k != "image_processor_type"}
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        self.processor = transformers.LightOnOcrProcessor(
            image_processor=PixtralImageProcessorPil(**settings),
            tokenizer=tokenizer,
            patch_size=14,
            spatial_merge_size=2,
            chat_template=CHAT_TEMPLATE,
        )
        self.model = transformers.LightOnOcrForConditionalGeneration.from_pretrained(folder).eval()
        self.system = system

    def transcribe(self, image: Any, *, instruction: str | None = None, max_new_tokens: int = 16) -> str:
        import torch

        content: list[dict[str, str]] = [{"type": "image"}]
        if instruction:
            content.append({"type": "text", "text": instruction})
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": content}]
        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = self.processor(text=text, images=[image.convert("RGB")], return_tensors="pt")
        with torch.no_grad():
            output = self.model.generate(
                **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
            )
        generated = output[0, inputs["input_ids"].shape[1] :]
        return str(self.processor.decode(generated, skip_special_tokens=True)).strip()


def model_yaml_lighton_ocr(sie_id: str, folder: Path, **runtime: Any) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "image": True},
        "tasks": {"extract": {}},
        "max_sequence_length": 16384,
        "profiles": {
            "default": {
                "adapter": "lighton_ocr",
                "compute_precision": "float32",
                "adapter_options": {"loadtime": {}, "runtime": {"max_new_tokens": 64, **runtime}},
            }
        },
    }
