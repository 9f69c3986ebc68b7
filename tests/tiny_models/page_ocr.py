"""What the tiny page OCR models share: their references (a transformers processor and greedy
`generate`, one page per call), that processor without its video half, and our YAML for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def images_only(processor_class: Any) -> Any:
    """A subclass of transformers' multimodal `processor_class` built from an image processor and a
    tokenizer alone: its video processor needs torchvision, which is not installed here."""

    class ImagesOnly(processor_class):  # type: ignore[misc, valid-type]
        @classmethod
        def get_attributes(cls) -> list[str]:
            return ["image_processor", "tokenizer"]

    return ImagesOnly


def processor_settings(processor: dict[str, Any]) -> dict[str, Any]:
    """preprocessor_config.json's settings as the image processor's constructor takes them."""
    return {k: v for k, v in processor.items() if k not in ("image_processor_type", "processor_class")}


class PageReference:
    """A family's processor and model, reading one page per call with the family's conversation:
    the page, then `text` (the family's default when not given; None: the page alone)."""

    processor: Any
    model: Any
    default_text: str | None = None
    template_kwargs: dict[str, Any] = {}  # read only
    generate_kwargs: dict[str, Any] = {}

    def conversation(self, text: str | None) -> list[dict[str, Any]]:
        content: list[dict[str, str]] = [{"type": "image"}]
        if text:
            content.append({"type": "text", "text": text})
        return [{"role": "user", "content": content}]

    def inputs(self, image: Any, text: str | None = "") -> Any:
        chosen = self.default_text if text == "" else text
        prompt = self.processor.apply_chat_template(
            self.conversation(chosen), add_generation_prompt=True, tokenize=False, **self.template_kwargs
        )
        return self.processor(text=prompt, images=[image.convert("RGB")], return_tensors="pt")

    def transcribe(self, image: Any, text: str | None = "", *, max_new_tokens: int = 16, **extra: Any) -> str:
        import torch

        inputs = self.inputs(image, text)
        options = {**self.generate_kwargs, **extra}
        with torch.no_grad():
            output = self.model.generate(
                **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, **options
            )
        generated = output[0, inputs["input_ids"].shape[1] :]
        return str(self.processor.decode(generated, skip_special_tokens=True)).strip()


def model_yaml_page_ocr(
    family: str, sie_id: str, folder: Path, max_sequence_length: int = 16384, **runtime: Any
) -> dict[str, Any]:
    """Our YAML for a tiny page OCR model in `folder`, float32, 64 new tokens unless `runtime` says."""
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "image": True},
        "tasks": {"extract": {}},
        "max_sequence_length": max_sequence_length,
        "profiles": {
            "default": {
                "adapter": family,
                "compute_precision": "float32",
                "adapter_options": {"loadtime": {}, "runtime": {"max_new_tokens": 64, **runtime}},
            }
        },
    }


def sharpen(model: Any, special_ids: list[int], *, layer_scale: float | None = 6.0) -> None:
    """Peaked next-token distributions (no near-ties to flip between a batch and one page) with text
    before EOS: a unit-variance LM head whose special-token rows are small, and, with `layer_scale`,
    the decoder's projections scaled so that the residual, and so the prompt, matters."""
    import torch

    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.normal_(0.0, 1.0)
        head[special_ids] *= 0.05
        if layer_scale is not None:
            for name, weight in model.model.language_model.layers.named_parameters():
                if name.endswith("proj.weight"):
                    weight.mul_(layer_scale)


def save_generator(model: Any, folder: Path, eos: int | list[int], pad: int) -> None:
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    model.save_pretrained(folder)


# Qwen's vision tokens and tokenizer settings (LightOnOCR-3, MinerU2.5).
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
QWEN_TOKENIZER = {
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
    "extra_special_tokens": {
        "image_token": "<|image_pad|>",
        "video_token": "<|video_pad|>",
        "vision_bos_token": "<|vision_start|>",
        "vision_eos_token": "<|vision_end|>",
    },
}


def write_tokenizer(
    folder: Path,
    corpus: list[str],
    specials: list[str],
    settings: dict[str, Any],
    template: str,
    vocab_size: int = 500,
) -> Any:
    """A byte-level BPE tokenizer.json, tokenizer_config.json with `settings`, and the chat template
    in chat_template.jinja (as the Hub's newer repositories keep it)."""
    import json

    from tests.tiny_models.bpe import byte_level_bpe

    tokenizer = byte_level_bpe(corpus, specials, vocab_size=vocab_size)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "TokenizersBackend", "model_max_length": 16384, **settings}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(template)
    return tokenizer
