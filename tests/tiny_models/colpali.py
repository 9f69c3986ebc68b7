"""A tiny random-weight ColPali (PaliGemma: SigLIP tower + Gemma decoder, and a projection).

The tokenizer is a byte-level BPE with Gemma's specials (<pad>, <eos>, <bos>, <unk>) and <image>,
so any text tokenizes; the processor is transformers' ColPaliProcessor over it and a SigLIP image
processor, saved as the hub's checkpoint is (preprocessor_config.json with image_seq_length).
"""

from __future__ import annotations

import functools
import io
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SIZE, PATCH_SIZE = 32, 8
IMAGE_SEQ_LENGTH = (IMAGE_SIZE // PATCH_SIZE) ** 2
TOKEN_DIM = 16
MERGES = [("t", "h"), ("th", "e"), ("i", "n"), ("Ġ", "c"), ("a", "t")]


def write_gemma_like_tokenizer(folder: Path) -> Any:
    """A byte-level BPE with PaliGemma's special tokens (the processor saves it as tokenizer.json)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    for symbol in bytes_to_unicode().values():
        vocab[symbol] = len(vocab)
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=MERGES, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<image>"]})
    return tokenizer


def make_colpali(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors weights, tokenizer and processor configs into `folder`."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_gemma_like_tokenizer(folder)
    vocab_size = len(tokenizer)
    vision = {
        "model_type": "siglip_vision_model",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "image_size": IMAGE_SIZE,
        "patch_size": PATCH_SIZE,
        "vision_use_head": False,
    }
    text = {
        "model_type": "gemma",
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "intermediate_size": 64,
        "vocab_size": vocab_size,
        "pad_token_id": 0,
    }
    vlm = {
        "model_type": "paligemma",
        "vision_config": vision,
        "text_config": text,
        "image_token_index": tokenizer.convert_tokens_to_ids("<image>"),
        "vocab_size": vocab_size,
        "projection_dim": 32,
        "hidden_size": 32,
    }
    torch.manual_seed(seed)
    config = transformers.ColPaliConfig(vlm_config=vlm, embedding_dim=TOKEN_DIM)
    model = transformers.ColPaliForRetrieval(config)
    model.eval().save_pretrained(folder)
    images = transformers.SiglipImageProcessorPil(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_seq_length=IMAGE_SEQ_LENGTH
    )
    transformers.ColPaliProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the hub's checkpoint has it
    return folder


def model_yaml_colpali(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"encode": {"multivector": {"dim": TOKEN_DIM}}},
        "max_sequence_length": 2048,
        "adapter": "colpali",
    }


@functools.cache
def _processor(folder: Path) -> Any:
    import transformers

    return transformers.ColPaliProcessor.from_pretrained(folder)


@functools.cache
def _model(folder: Path) -> Any:
    import transformers

    return transformers.ColPaliForRetrieval.from_pretrained(folder).eval()


def reference_pixels(folder: Path, images: list[bytes]) -> np.ndarray:
    """The processor's pixel_values [n, 3, H, W] for the image bytes."""
    from PIL import Image

    processor = _processor(folder)
    batch = processor.process_images([Image.open(io.BytesIO(data)) for data in images])
    return batch["pixel_values"].numpy()


def reference_images(folder: Path, images: list[bytes]) -> list[np.ndarray]:
    """ColPaliProcessor.process_images + ColPaliForRetrieval, one image at a time: [tokens, dim]."""
    from PIL import Image

    processor = _processor(folder)
    return [_embed(folder, processor.process_images([Image.open(io.BytesIO(data))])) for data in images]


def reference_queries(folder: Path, texts: list[str]) -> list[np.ndarray]:
    """ColPaliProcessor.process_queries + ColPaliForRetrieval, one query at a time: [tokens, dim]."""
    processor = _processor(folder)
    return [_embed(folder, processor.process_queries([text])) for text in texts]


def reference_query_ids(folder: Path, texts: list[str]) -> list[list[int]]:
    processor = _processor(folder)
    return [processor.process_queries([text])["input_ids"][0].tolist() for text in texts]


def reference_image_ids(folder: Path, image: bytes) -> list[int]:
    from PIL import Image

    processor = _processor(folder)
    return [int(i) for i in processor.process_images([Image.open(io.BytesIO(image))])["input_ids"][0]]


def _embed(folder: Path, batch: Any) -> np.ndarray:
    import torch

    with torch.no_grad():
        embeddings = _model(folder)(**batch).embeddings[0]
    return np.asarray(embeddings[batch["attention_mask"][0].bool()].numpy())
