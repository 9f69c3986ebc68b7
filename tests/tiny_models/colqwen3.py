"""A tiny random-weight ColQwen3 in TomoroAI's Hub layout, and its reference.

The folder is what `TomoroAI/tomoro-colqwen3-embed-4b` ships for its remote code: config.json of
`model_type: colqwen3` (Qwen3-VL's `text_config` and `vision_config`, `embed_dim`, `auto_map` naming
the code), safetensors of that code's module names (`vlm.model.*` the Qwen3-VL model, `vlm.lm_head`,
`embedding_proj_layer` the projection, with a bias), the tokenizer, Qwen2VLImageProcessor's
preprocessor_config.json and processor_config.json. `legacy_names` writes a bare Qwen3-VL checkpoint
instead (`model.*`, `custom_text_proj`), which the remote code also loads.

The reference restates the remote code's recipe on transformers' own pieces, one item at a time:
its processor (the image processor capped at `max_num_visual_tokens` merged patches, pages in its
visual prompt with one `<|image_pad|>` per merged patch, texts stripped and followed by ten
`<|endoftext|>`), and its forward: Qwen3VLForConditionalGeneration's inner model holding the saved
weights (loaded by name, strictly), the last hidden states through the projection, unit length.
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from tests.tiny_models.qwen3_vl import (
    HIDDEN,
    MAX_SEQUENCE_LENGTH,
    tiny_qwen3_vl_config,
    write_image_processor,
    write_tokenizer,
)

TOKEN_DIM = 24
VISUAL_PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|><|endoftext|>"
)
QUERY_SUFFIX = "<|endoftext|>" * 10
HUB_VISUAL_TOKENS = 1280  # the processor's default cap
AUTO_MAP = {
    "AutoConfig": "configuration_colqwen3.ColQwen3Config",
    "AutoModel": "modeling_colqwen3.ColQwen3",
    "AutoProcessor": "processing_colqwen3.ColQwen3Processor",
}


def make_colqwen3(folder: Path, seed: int = 0, *, legacy_names: bool = False) -> Path:
    import torch
    import transformers
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    config = tiny_qwen3_vl_config(tokenizer, tied=False)
    torch.manual_seed(seed)
    vlm = transformers.Qwen3VLForConditionalGeneration(config).eval()
    projection = torch.nn.Linear(HIDDEN, TOKEN_DIM)
    torch.nn.init.normal_(projection.weight, std=0.3)
    torch.nn.init.normal_(projection.bias, std=0.3)
    if legacy_names:
        config.save_pretrained(folder)
        weights = {f"model.{k}": v for k, v in vlm.model.state_dict().items()}
        weights |= {f"custom_text_proj.{k}": v for k, v in projection.state_dict().items()}
    else:
        hub = {
            "architectures": ["ColQwen3"],
            "auto_map": AUTO_MAP,
            "model_type": "colqwen3",
            "embed_dim": TOKEN_DIM,
            "padding_side": "left",
            "initializer_range": 0.02,
            "text_config": config.text_config.to_dict(),
            "vision_config": config.vision_config.to_dict(),
            **{key: getattr(config, key) for key in _TOKEN_ID_KEYS},
        }
        (folder / "config.json").write_text(json.dumps(hub, indent=2))
        weights = {f"vlm.{k}": v for k, v in vlm.state_dict().items()}
        weights |= {f"embedding_proj_layer.{k}": v for k, v in projection.state_dict().items()}
    contiguous = {k: v.contiguous() for k, v in weights.items()}
    save_file(contiguous, str(folder / "model.safetensors"), metadata={"format": "pt"})
    write_image_processor(folder)
    (folder / "processor_config.json").write_text(
        json.dumps({"processor_class": "ColQwen3Processor", "auto_map": AUTO_MAP})
    )
    return folder


_TOKEN_ID_KEYS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")


def model_yaml_colqwen3(sie_id: str, folder: Path, compact_tokens: int = 80) -> dict[str, Any]:
    """SIE's profiles for the model: the default, `muvera` (dense by MUVERA), and `compact`, a lower
    page cap (SIE's is 768 visual tokens; here small enough to change a tiny test page)."""
    loadtime = {"trust_remote_code": True, "token_dim": TOKEN_DIM}
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"encode": {"multivector": {"dim": TOKEN_DIM}}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "profiles": {
            "default": {
                "adapter": "colqwen3",
                "max_batch_tokens": 4096,
                "adapter_options": {"loadtime": loadtime, "runtime": {"normalize": True}},
            },
            "muvera": {
                "extends": "default",
                "adapter_options": {"runtime": {"output_types": ["dense"], "muvera": {}}},
            },
            "compact": {
                "extends": "default",
                "adapter_options": {"loadtime": {**loadtime, "max_num_visual_tokens": compact_tokens}},
            },
        },
    }


@functools.cache
def _reference_model(folder: Path) -> tuple[Any, Any]:
    """The remote code's forward on transformers' classes: (Qwen3-VL's inner model, projection)."""
    import torch
    import transformers
    from safetensors.torch import load_file

    raw = json.loads((folder / "config.json").read_text())
    config = transformers.Qwen3VLConfig(
        text_config=raw["text_config"],
        vision_config=raw["vision_config"],
        tie_word_embeddings=False,
        **{key: raw[key] for key in _TOKEN_ID_KEYS},
    )  # as the remote code builds it, whichever layout the folder has
    vlm = transformers.Qwen3VLForConditionalGeneration(config).eval()
    weights = load_file(str(folder / "model.safetensors"))
    # The remote code's names, or a bare Qwen3-VL's (whose checkpoint has no LM head, unused here).
    backbone = {k.removeprefix("vlm."): v for k, v in weights.items() if k.startswith(("vlm.", "model."))}
    missing, unexpected = vlm.load_state_dict(backbone, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    head = {
        k.split(".")[-1]: v
        for k, v in weights.items()
        if k.startswith(("embedding_proj_layer.", "custom_text_proj."))
    }
    projection = torch.nn.Linear(HIDDEN, head["weight"].shape[0])
    projection.load_state_dict(head)
    return vlm.model, projection.eval()


@functools.cache
def _pieces(folder: Path, visual_tokens: int) -> tuple[Any, Any]:
    import transformers

    images = transformers.Qwen2VLImageProcessorPil.from_pretrained(folder)
    tile = images.patch_size * images.merge_size
    images.size["longest_edge"] = visual_tokens * tile * tile  # the processor's from_pretrained cap
    return images, transformers.PreTrainedTokenizerFast.from_pretrained(folder)


def _embed(folder: Path, inputs: dict[str, Any]) -> np.ndarray:
    import torch

    model, projection = _reference_model(folder)
    with torch.no_grad():
        hidden = model(**inputs, use_cache=False).last_hidden_state
        vectors = projection(hidden)
        vectors = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(vectors.dtype).eps)
    return np.asarray(vectors[0].numpy())


def reference_images(
    folder: Path, images: list[bytes], visual_tokens: int = HUB_VISUAL_TOKENS
) -> list[np.ndarray]:
    """Each page alone: [tokens, dim]."""
    import torch
    from PIL import Image

    image_processor, tokenizer = _pieces(folder, visual_tokens)
    merge = image_processor.merge_size**2
    out = []
    for data in images:
        # The image processor's own RGB conversion (transparency onto white), as this server decodes
        # every image; the remote processor's plain convert("RGB") would keep the hidden colours.
        processed = image_processor(images=[[Image.open(io.BytesIO(data))]], return_tensors="pt")
        grid = processed["image_grid_thw"]
        prompt = VISUAL_PROMPT.replace("<|image_pad|>", "<|image_pad|>" * int(grid[0].prod() // merge))
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        image_id = _reference_model(folder)[0].config.image_token_id
        inputs = {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "pixel_values": processed["pixel_values"],
            "image_grid_thw": grid,
            "mm_token_type_ids": (ids == image_id).to(torch.int32),
        }
        out.append(_embed(folder, inputs))
    return out


def reference_queries(folder: Path, texts: list[str], prefix: str = "") -> list[np.ndarray]:
    import torch

    _, tokenizer = _pieces(folder, HUB_VISUAL_TOKENS)
    out = []
    for text in texts:
        ids = torch.tensor([tokenizer(f"{prefix}{text.strip()}{QUERY_SUFFIX}")["input_ids"]])
        out.append(_embed(folder, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}))
    return out
