"""Tiny random-weight CLIP and SigLIP models, with a byte-level BPE tokenizer and image processors.

No weights can be downloaded here, so the tokenizer is CLIP's scheme on a minimal vocabulary:
the 256 byte symbols, each again with the end-of-word suffix, a few merges, and the two specials.
Any text tokenizes (byte fallback), which is all a random model needs.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

MERGES = [("t", "h"), ("th", "e</w>"), ("o", "n"), ("i", "n"), ("c", "a"), ("ca", "t</w>"), ("d", "o")]
IMAGE_SIZE = 64
PATCH_SIZE = 16
PROJECTION_DIM = 16
SIGLIP_TEXT_LENGTH = 16  # SigLIP pads every text to its full length


def write_clip_tokenizer(folder: Path, **special: str) -> int:
    """Save a CLIPTokenizer (tokenizer.json) into `folder`; return its vocabulary size."""
    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab.update({s + "</w>": len(symbols) + i for i, s in enumerate(symbols)})
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    tokenizer = CLIPTokenizer(vocab=vocab, merges=MERGES, **special)
    tokenizer.save_pretrained(folder)
    return len(vocab)


def make_clip(
    folder: Path,
    seed: int = 0,
    *,
    arch: str = "clip",
    image_size: int = IMAGE_SIZE,
    patch_size: int = PATCH_SIZE,
    hidden: int = 32,
) -> Path:
    """Write config, safetensors weights, tokenizer.json and preprocessor_config.json; return it."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_clip_tokenizer(folder)
    eos = vocab_size - 1
    tower = {
        "hidden_size": hidden,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 2 * hidden,
    }
    text = {
        **tower,
        "vocab_size": vocab_size,
        "eos_token_id": eos,
        "bos_token_id": eos - 1,
        "pad_token_id": eos,
    }
    vision = {**tower, "image_size": image_size, "patch_size": patch_size}
    torch.manual_seed(seed)
    if arch == "siglip":
        config: Any = transformers.SiglipConfig(
            text_config={**text, "max_position_embeddings": SIGLIP_TEXT_LENGTH, "projection_size": hidden},
            vision_config=vision,
        )
        model: Any = transformers.SiglipModel(config)
        processor: Any = transformers.SiglipImageProcessorPil(
            size={"height": image_size, "width": image_size}
        )
    else:
        config = transformers.CLIPConfig(
            text_config={**text, "max_position_embeddings": 77},
            vision_config=vision,
            projection_dim=PROJECTION_DIM,
        )
        model = transformers.CLIPModel(config)
        processor = transformers.CLIPImageProcessorPil(
            size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
        )
    model.eval().save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def clip_dim(arch: str, hidden: int = 32) -> int:
    return hidden if arch == "siglip" else PROJECTION_DIM


def model_yaml_clip(sie_id: str, folder: Path, arch: str = "clip") -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"encode": {"dense": {"dim": clip_dim(arch)}}},
        "max_sequence_length": SIGLIP_TEXT_LENGTH if arch == "siglip" else 77,
        "adapter": "clip",
    }


def model_yaml_siglip(sie_id: str, folder: Path) -> dict[str, Any]:
    return model_yaml_clip(sie_id, folder, "siglip")


def make_siglip(folder: Path, seed: int = 0) -> Path:
    return make_clip(folder, seed, arch="siglip")


def reference_image_features(folder: Path, images: list[bytes]) -> np.ndarray:
    """transformers' processor + get_image_features on the same bytes (not normalized)."""
    import torch
    import transformers
    from PIL import Image

    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    model: Any = transformers.AutoModel.from_pretrained(folder).eval()
    pixels = processor([Image.open(io.BytesIO(data)) for data in images], return_tensors="pt").pixel_values
    with torch.no_grad():
        return model.get_image_features(pixel_values=pixels).pooler_output.numpy()


def reference_text_features(folder: Path, texts: list[str], arch: str) -> np.ndarray:
    """transformers' tokenizer + get_text_features (not normalized)."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model: Any = transformers.AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        if arch == "siglip":  # as its processor: padded to full length, no attention mask
            ids = tokenizer(
                texts,
                padding="max_length",
                truncation=True,
                max_length=SIGLIP_TEXT_LENGTH,
                return_tensors="pt",
            )
            return model.get_text_features(input_ids=ids.input_ids).pooler_output.numpy()
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        return model.get_text_features(**batch).pooler_output.numpy()
