"""A tiny random-weight ColQwen2.5 in colpali-engine's published layout, and its reference.

The model folder is a PEFT LoRA as vidore/colqwen2.5-v0.2 is (adapter_config.json and
adapter_model.safetensors, with the tokenizer and the image processor's preprocessor_config.json);
its `base_model_name_or_path` is a full checkpoint as vidore/colqwen2.5-base is (a Qwen2.5-VL
config.json, weights under colpali-engine's names: `model.*` the decoder, `visual.*` the vision
tower, `custom_text_proj` the projection). The LoRA adapts the decoder's projections and
custom_text_proj, with colpali-engine's target_modules pattern.

The reference is colpali-engine's recipe on transformers' and PEFT's own code (colpali-engine
itself needs torchvision, not installed here): `ReferenceColQwen` is its ColQwen2_5 (Qwen2_5_VLModel
+ custom_text_proj; the forward passes the image grid and token types, so Qwen2.5-VL's 3D
positions), loaded from the LoRA folder by transformers' PEFT integration under colpali-engine's key
mapping, as colpali-engine and SIE load it. Pages go through transformers' ColQwen2Processor with
the visual prompt SIE uses (also its default) and SIE's pixel bounds; queries through the tokenizer
as Qwen2VLProcessor's text path does, with SIE's suffix and no prefix.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

PATCH, MERGE = 14, 2
TOKEN_DIM = 16
# SIE's ColQwen2.5 processor bounds, which replace the folder's.
SIE_MIN_PIXELS, SIE_MAX_PIXELS = 256 * 28 * 28, 768 * 28 * 28
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# colpali-engine's ColQwen2_5 names -> Qwen2_5_VLModel's (its `_checkpoint_conversion_mapping`).
COLPALI_ENGINE_KEYS = {
    r"^base_model\.model\.custom_text_proj": "custom_text_proj",
    r"^model\.layers": "language_model.layers",
    r"^model\.embed_tokens": "language_model.embed_tokens",
    r"^model\.norm": "language_model.norm",
}
TARGET_MODULES = (
    "(.*(model)(?!.*visual).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$"
    "|.*(custom_text_proj).*$)"
)
DECODER_MODULES = "(.*(model)(?!.*visual).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$)"
MERGES = [("t", "h"), ("th", "e"), ("i", "n"), ("Ġ", "c"), ("a", "t"), ("Ċ", "Ċ")]
QUERY_SUFFIX = "<|endoftext|>" * 10


def byte_level_tokenizer(specials: list[str], **roles: str) -> Any:
    """A byte-level BPE (any text tokenizes) with the model's special tokens added."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab: dict[str, int] = {}
    for symbol in bytes_to_unicode().values():
        vocab[symbol] = len(vocab)
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, **roles)
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    return tokenizer


def reference_class() -> Any:
    """colpali-engine's ColQwen2_5 on transformers' Qwen2_5_VLModel."""
    import torch
    import transformers

    class ReferenceColQwen(transformers.Qwen2_5_VLModel):  # type: ignore[misc]
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.custom_text_proj = torch.nn.Linear(config.text_config.hidden_size, TOKEN_DIM)
            self.post_init()

        def embed(self, batch: dict[str, Any]) -> Any:
            extra = {}
            if "pixel_values" in batch:
                grid = batch["image_grid_thw"]
                offsets = (grid[:, 1] * grid[:, 2]).tolist()
                pixels = torch.cat([p[:n] for p, n in zip(batch["pixel_values"], offsets, strict=True)])
                tokens = (batch["input_ids"] == self.config.image_token_id).int()
                extra = {"pixel_values": pixels, "image_grid_thw": grid, "mm_token_type_ids": tokens}
            hidden = self(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], **extra)
            projected = self.custom_text_proj(hidden.last_hidden_state)
            projected = projected / projected.norm(dim=-1, keepdim=True)
            return projected * batch["attention_mask"].unsqueeze(-1)

    return ReferenceColQwen


def make_colqwen2(
    folder: Path,
    seed: int = 0,
    base: Path | None = None,
    *,
    engine_names: bool = True,
    whole_projection: bool = False,
) -> Path:
    """Write the LoRA folder into `folder` and its base checkpoint into `base` (default: beside it).
    `engine_names`: colpali-engine's names in both (else Qwen2_5_VLModel's own); `whole_projection`:
    the projection saved whole in the adapter (PEFT's modules_to_save) instead of adapted."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True, exist_ok=True)
    base = base or folder.with_name(f"{folder.name}-base")
    tokenizer = byte_level_tokenizer(QWEN_SPECIALS, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    torch.manual_seed(seed)
    model = reference_class()(qwen_config(tokenizer)).eval()
    rename = _engine_names if engine_names else (lambda key: key)
    base.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(base)
    weights = {rename(k): v.contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(base / "model.safetensors"), metadata={"format": "pt"})
    targets = DECODER_MODULES if whole_projection else TARGET_MODULES
    extra = {"modules_to_save": ["custom_text_proj"]} if whole_projection else {}
    with peft_quiet():
        lora = get_peft_model(
            model, LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False, **extra)
        )
    if whole_projection:
        torch.nn.init.normal_(lora.base_model.model.custom_text_proj.modules_to_save["default"].weight)
    lora.save_pretrained(folder)
    saved = load_file(str(folder / "adapter_model.safetensors"))
    renamed = {_adapter_key(k, rename): v for k, v in saved.items()}
    save_file(renamed, str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base)}))
    tokenizer.save_pretrained(folder)
    # The hub folder's processor config, whose pixel bounds SIE replaces with its own.
    hub_images = transformers.Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 1280)
    hub_images.save_pretrained(folder)
    return folder


def _engine_names(key: str) -> str:
    """Qwen2_5_VLModel's name -> the one colpali-engine's checkpoints use (the decoder as `model`)."""
    return re.sub(r"^language_model\.", "model.", key)


def _adapter_key(key: str, rename: Any) -> str:
    prefix = "base_model.model."
    return prefix + rename(key.removeprefix(prefix))


def qwen_config(tokenizer: Any) -> Any:
    import transformers

    ids = tokenizer.convert_tokens_to_ids(QWEN_SPECIALS)
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 4,
        "out_hidden_size": 32,
        "patch_size": PATCH,
        "spatial_merge_size": MERGE,
        "temporal_patch_size": 2,
        "window_size": 56,
        "fullatt_block_indexes": [1],
    }
    text = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": len(tokenizer),
        "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]},
        "max_position_embeddings": 4096,
        "bos_token_id": ids[0],
        "eos_token_id": ids[0],
        "pad_token_id": ids[0],
    }
    return transformers.Qwen2_5_VLConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=ids[5],
        video_token_id=ids[6],
        vision_start_token_id=ids[3],
        vision_end_token_id=ids[4],
    )


def model_yaml_colqwen2(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"encode": {"multivector": {"dim": TOKEN_DIM}}},
        "max_sequence_length": 2048,
        "adapter": "colqwen2",
    }


@functools.cache
def _processor(folder: Path) -> Any:
    import transformers

    images = transformers.Qwen2VLImageProcessorPil.from_pretrained(
        folder, min_pixels=SIE_MIN_PIXELS, max_pixels=SIE_MAX_PIXELS
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    return transformers.ColQwen2Processor(image_processor=images, tokenizer=tokenizer)


@functools.cache
def _model(folder: Path) -> Any:
    with peft_quiet():
        return reference_class().from_pretrained(folder, key_mapping=COLPALI_ENGINE_KEYS).eval()


@contextlib.contextmanager
def peft_quiet() -> Iterator[None]:
    """PEFT 0.21 asks transformers 5 for a property it has deprecated (a FutureWarning)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        yield


def page_batch(folder: Path, image: bytes) -> Any:
    """The processor's page inputs: pixel_values [1, patches, 1176], image_grid_thw, ids, mask."""
    from PIL import Image

    # The processor's own RGB conversion (transparency onto white), as the server decodes images.
    return _processor(folder)(images=[Image.open(io.BytesIO(image))])


def query_batch(folder: Path, text: str) -> Any:
    return _processor(folder).tokenizer([f"{text}{QUERY_SUFFIX}"], return_tensors="pt")


def reference_images(folder: Path, images: list[bytes]) -> list[np.ndarray]:
    """Each page alone through the reference: [tokens, dim]."""
    return [_embed(folder, page_batch(folder, data)) for data in images]


def reference_queries(folder: Path, texts: list[str]) -> list[np.ndarray]:
    return [_embed(folder, query_batch(folder, text)) for text in texts]


def _embed(folder: Path, batch: Any) -> np.ndarray:
    import torch

    with torch.no_grad():
        vectors = _model(folder).embed(dict(batch))[0]
    return np.asarray(vectors[batch["attention_mask"][0].bool()].numpy())
