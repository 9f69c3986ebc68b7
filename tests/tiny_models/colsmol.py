"""A tiny random-weight ColSmol in colpali-engine's published layout, and its reference.

The model folder is a PEFT LoRA as vidore/colSmol-256M is (adapter_config.json and
adapter_model.safetensors, the tokenizer, processor_config.json with `image_seq_len` and the image
processor's preprocessor_config.json); its `base_model_name_or_path` is a full checkpoint as
vidore/ColSmolVLM-Instruct-256M-base is (an Idefics3 config.json; colpali-engine's ColIdefics3
weights: `model.*` the Idefics3Model, `linear` the projection). The LoRA adapts the text model's
projections and `linear`, with colpali-engine's target_modules pattern.

The reference is SIE's recipe on transformers' and PEFT's code (colpali-engine itself needs
torchvision, not installed here): `ReferenceColSmol` is colpali-engine's ColIdefics3 (Idefics3Model
+ linear), loaded from the LoRA folder by transformers' PEFT integration; pages and queries go
through Idefics3Processor exactly as SIE's adapter calls it (the visual prompt with the page as its
one image, or the text with ten "<end_of_utterance>").
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.tiny_models.colqwen2 import byte_level_tokenizer, peft_quiet

TOKEN_DIM = 16
TILE, PATCH, SCALE = 32, 8, 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE**2
LONGEST_EDGE = 3 * TILE  # pages of up to 3 x 3 tiles and a global view
SMOL_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
]
TARGET_MODULES = (
    "(.*(model.text_model).*(down_proj|gate_proj|up_proj|k_proj|q_proj|v_proj|o_proj).*$|.*(linear).*$)"
)
VISUAL_PROMPT = "<|im_start|>User:<image>Describe the image.<end_of_utterance>\nAssistant:"
QUERY_SUFFIX = "<end_of_utterance>" * 10


def reference_class() -> Any:
    """colpali-engine's ColIdefics3 on transformers' Idefics3Model."""
    import torch
    import transformers

    class ReferenceColSmol(transformers.Idefics3PreTrainedModel):  # type: ignore[misc]
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.model = transformers.Idefics3Model(config)
            self.linear = torch.nn.Linear(config.text_config.hidden_size, TOKEN_DIM)
            self.post_init()

        def embed(self, batch: dict[str, Any]) -> Any:
            hidden = self.model(**batch).last_hidden_state
            projected = self.linear(hidden)
            projected = projected / projected.norm(dim=-1, keepdim=True)
            return projected * batch["attention_mask"].unsqueeze(-1)

    return ReferenceColSmol


def make_colsmol(folder: Path, seed: int = 0, base: Path | None = None) -> Path:
    """Write the LoRA folder into `folder` and its base checkpoint into `base` (default: beside it)."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    folder.mkdir(parents=True, exist_ok=True)
    base = base or folder.with_name(f"{folder.name}-base")
    tokenizer = byte_level_tokenizer(
        SMOL_SPECIALS, bos_token="<|im_start|>", eos_token="<end_of_utterance>", pad_token="<|endoftext|>"
    )
    torch.manual_seed(seed)
    model = reference_class()(smol_config(tokenizer)).eval()
    model.save_pretrained(base)
    with peft_quiet():
        lora = get_peft_model(
            model, LoraConfig(r=4, lora_alpha=8, target_modules=TARGET_MODULES, init_lora_weights=False)
        )
    lora.save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": str(base)}))
    images = transformers.Idefics3ImageProcessorPil(
        size={"longest_edge": LONGEST_EDGE},
        max_image_size={"longest_edge": TILE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    transformers.Idefics3Processor(images, tokenizer, image_seq_len=IMAGE_SEQ_LEN).save_pretrained(folder)
    images.save_pretrained(folder)  # preprocessor_config.json, as the hub's folder has it
    return folder


def smol_config(tokenizer: Any) -> Any:
    import transformers

    vision = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": TILE,
        "patch_size": PATCH,
    }
    text = {
        "model_type": "llama",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    return transformers.Idefics3Config(
        vision_config=vision,
        text_config=text,
        scale_factor=SCALE,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
    )


def model_yaml_colsmol(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"encode": {"multivector": {"dim": TOKEN_DIM}}},
        "max_sequence_length": 2048,
        "adapter": "colsmol",
    }


@functools.cache
def _processor(folder: Path) -> Any:
    import transformers

    return transformers.Idefics3Processor.from_pretrained(folder)


@functools.cache
def _model(folder: Path) -> Any:
    with peft_quiet():
        return reference_class().from_pretrained(folder).eval()


def page_batch(folder: Path, image: bytes) -> Any:
    """SIE's processor call for one page: input_ids, attention_mask, pixel_values [1, frames, 3, t, t]."""
    from PIL import Image

    # The processor's own RGB conversion (transparency onto white), as the server decodes images.
    page = Image.open(io.BytesIO(image))
    return _processor(folder)(text=[VISUAL_PROMPT], images=[[page]], padding="longest", return_tensors="pt")


def query_batch(folder: Path, text: str) -> Any:
    return _processor(folder)(text=[f"{text}{QUERY_SUFFIX}"], padding="longest", return_tensors="pt")


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
