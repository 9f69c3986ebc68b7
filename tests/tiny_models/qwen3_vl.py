"""A tiny random-weight Qwen3-VL (a two-block vision tower with DeepStack, a two-layer decoder),
saved as the hub's checkpoints are: config.json and safetensors of Qwen3VLForConditionalGeneration,
a byte-level BPE tokenizer.json with Qwen's pre-tokenizer and its chat and vision tokens,
preprocessor_config.json (Qwen2VLImageProcessor, 16-px patches) and a Qwen-VL chat template.

The references restate SIE's recipe from its adapters (sie_server.adapters.qwen3_vl_embedding and
qwen3_vl_reranker), so a slip in ours cannot hide in them, and run it through transformers' own
pieces, one item at a time: the image processor with SIE's min/max pixels, the chat template, the
processor's placeholder expansion (Qwen3VLProcessor itself needs torchvision for its video half,
which is not installed), and Qwen3VLForConditionalGeneration.
"""

from __future__ import annotations

import functools
import io
import json
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np

MAX_SEQUENCE_LENGTH = 4096
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Qwen2's pre-tokenizer split: a newline run is its own piece, so the prompt's joins are observable.
_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CORPUS = [
    "yes no system user assistant Represent the user's input. Judge whether the Document meets the "
    "requirements based on the Query and the Instruct provided. Note that the answer can only be",
    "<Instruct>: <Query>: <Document>: NULL Retrieve relevant documents for the query. Find a photo",
    "a red square a blue circle cats sleep all day dogs bark loudly the stock market closed higher",
]
# Qwen-VL's chat format: ChatML turns, an image part as vision start, one pad, vision end.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' or 'image' in part -%}{{- '<|vision_start|><|image_pad|><|vision_end|>' -}}"
    "{%- elif part.type == 'video' or 'video' in part -%}"
    "{{- '<|vision_start|><|video_pad|><|vision_end|>' -}}"
    "{%- elif 'text' in part -%}{{- part.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
PATCH_SIZE, MERGE_SIZE = 16, 2
HIDDEN = 32
# SIE's processor arguments: min_pixels=256*28*28, max_pixels=1280*28*28.
SIE_MIN_PIXELS, SIE_MAX_PIXELS = 256 * 28 * 28, 1280 * 28 * 28
SIE_EMBED_INSTRUCTION = "Represent the user's input."
SIE_RERANK_INSTRUCTION = "Retrieve relevant documents for the query."
_SIE_RERANK_SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)


def write_tokenizer(folder: Path) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 3, trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": MAX_SEQUENCE_LENGTH,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return tokenizer


def tiny_qwen3_vl_config(tokenizer: Any, *, tied: bool) -> Any:
    """The tiny Qwen3-VL's config (a two-block vision tower with DeepStack, a two-layer decoder) for
    `tokenizer`'s special tokens; `tied`: the LM head is the embedding matrix."""
    import transformers

    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    text = {
        "hidden_size": HIDDEN,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": tokenizer.get_vocab_size(),
        "max_position_embeddings": MAX_SEQUENCE_LENGTH,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
        "initializer_range": 0.2,  # wide, so the yes/no logits depend clearly on the prompt
    }
    vision = {
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 4,
        "out_hidden_size": HIDDEN,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": 2,
        "num_position_embeddings": 16,
        "deepstack_visual_indexes": [0],
        "initializer_range": 0.2,
    }
    return transformers.Qwen3VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=tied,
    )


def make_qwen3_vl(folder: Path, seed: int = 0, *, tied: bool = True) -> Path:
    """Write the tiny model into `folder` (`tied`: the LM head is the embedding matrix)."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder)
    config = tiny_qwen3_vl_config(tokenizer, tied=tied)
    torch.manual_seed(seed)
    transformers.Qwen3VLForConditionalGeneration(config).eval().save_pretrained(folder)
    write_image_processor(folder)
    return folder


def write_image_processor(folder: Path) -> None:
    """Qwen3-VL's preprocessor_config.json: Qwen2VLImageProcessor with 16-px patches and the hub's
    pixel bounds (SIE and ColQwen3's processor override them)."""
    import transformers

    transformers.Qwen2VLImageProcessorPil(
        patch_size=PATCH_SIZE,
        merge_size=MERGE_SIZE,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": 65536, "longest_edge": 16777216},
    ).save_pretrained(folder)


def model_yaml_qwen3_vl_embedding(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"encode": {"dense": {"dim": HIDDEN}}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "profiles": {
            "default": {
                "adapter": "qwen3_vl_embedding",
                "max_batch_tokens": 4096,
                "adapter_options": {
                    "runtime": {
                        "pooling": "last",
                        "normalize": True,
                        "default_instruction": SIE_EMBED_INSTRUCTION,
                    }
                },
            }
        },
    }


def model_yaml_qwen3_vl_reranker(sie_id: str, folder: Path) -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"score": {}},
        "max_sequence_length": MAX_SEQUENCE_LENGTH,
        "profiles": {
            "default": {
                "adapter": "qwen3_vl_reranker",
                "max_batch_tokens": 4096,
                "adapter_options": {"runtime": {"default_instruction": SIE_RERANK_INSTRUCTION}},
            }
        },
    }


@functools.cache
def _model(folder: Path) -> Any:
    import transformers

    return transformers.Qwen3VLForConditionalGeneration.from_pretrained(folder).eval()


@functools.cache
def _pieces(folder: Path) -> tuple[Any, Any]:
    import transformers

    images = transformers.AutoImageProcessor.from_pretrained(
        folder, min_pixels=SIE_MIN_PIXELS, max_pixels=SIE_MAX_PIXELS
    )
    return images, transformers.AutoTokenizer.from_pretrained(folder)


def _sie_instruction(instruction: str | None) -> str:
    """SIE's `_normalize_instruction(instruction or "") or _normalize_instruction(default)`."""

    def shaped(text: str) -> str:
        text = text.strip()
        if text and not unicodedata.category(text[-1]).startswith("P"):
            text += "."
        return text

    return shaped(instruction or "") or shaped(SIE_EMBED_INSTRUCTION)


def reference_inputs(folder: Path, conversation: list[dict[str, Any]], images: list[bytes]) -> dict[str, Any]:
    """SIE's processor call for one conversation: the model's keyword arguments."""
    import torch
    from PIL import Image

    image_processor, tokenizer = _pieces(folder)
    prompt = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    inputs: dict[str, Any] = {}
    if images:
        pictures = [Image.open(io.BytesIO(data)) for data in images]
        processed = image_processor(images=pictures, return_tensors="pt")
        merge = image_processor.merge_size**2
        for grid in processed["image_grid_thw"]:  # Qwen3VLProcessor's expansion, image by image
            prompt = prompt.replace("<|image_pad|>", "<|placeholder|>" * int(grid.prod() // merge), 1)
        prompt = prompt.replace("<|placeholder|>", "<|image_pad|>")
        inputs = {"pixel_values": processed["pixel_values"], "image_grid_thw": processed["image_grid_thw"]}
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    image_token_id = _model(folder).config.image_token_id
    mm_types = (ids == image_token_id).to(torch.int32)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "mm_token_type_ids": mm_types, **inputs}


def sie_embedding_conversation(
    text: str | None, n_images: int, instruction: str | None
) -> list[dict[str, Any]]:
    """SIE's `_build_conversation`: system = the instruction, user = the images, then the text."""
    content: list[dict[str, Any]] = [{"type": "image", "image": "x"} for _ in range(n_images)]
    if text:
        content.append({"type": "text", "text": text})
    return [
        {"role": "system", "content": [{"type": "text", "text": _sie_instruction(instruction)}]},
        {"role": "user", "content": content or [{"type": "text", "text": ""}]},
    ]


def sie_reranker_conversation(
    query: tuple[str | None, bytes | None], document: tuple[str | None, bytes | None], instruction: str | None
) -> list[dict[str, Any]]:
    """SIE's `_build_reranker_conversation`: the judge as system, instruction, query, document."""
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "<Instruct>: " + (instruction or SIE_RERANK_INSTRUCTION)},
        *_side("<Query>:", *query),
        *_side("\n<Document>:", *document),
    ]
    return [
        {"role": "system", "content": [{"type": "text", "text": _SIE_RERANK_SYSTEM}]},
        {"role": "user", "content": content},
    ]


def reference_embeddings(
    folder: Path, items: list[tuple[str | None, list[bytes]]], instruction: str | None = None
) -> np.ndarray:
    """SIE's Qwen3VLEmbeddingAdapter: system = the instruction, user = images then text; the last
    token's post-norm hidden state of the base model, L2-normalized."""
    import torch

    rows = []
    for text, images in items:
        conversation = sie_embedding_conversation(text, len(images), instruction)
        with torch.no_grad():  # SIE pools the base model's output (post final norm)
            hidden = _model(folder).model(**reference_inputs(folder, conversation, images)).last_hidden_state
        rows.append(torch.nn.functional.normalize(hidden[0, -1], dim=-1).numpy())
    return np.stack(rows)


def reference_scores(
    folder: Path,
    query: tuple[str | None, bytes | None],
    documents: list[tuple[str | None, bytes | None]],
    instruction: str | None = None,
) -> np.ndarray:
    """SIE's Qwen3VLRerankerAdapter: sigmoid(yes - no) of the full model's last logits, per pair."""
    import torch

    _, tokenizer = _pieces(folder)
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    scores = []
    for text, image in documents:
        conversation = sie_reranker_conversation(query, (text, image), instruction)
        images = [data for data in (query[1], image) if data is not None]
        with torch.no_grad():
            logits = _model(folder)(**reference_inputs(folder, conversation, images)).logits[0, -1].float()
        scores.append(float(torch.sigmoid(logits[yes] - logits[no])))
    return np.asarray(scores, np.float32)


def _side(prefix: str, text: str | None, image: bytes | None) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": prefix}]
    if image is not None:
        parts.append({"type": "image", "image": "x"})
    if text:
        parts.append({"type": "text", "text": text})
    if not text and image is None:
        parts.append({"type": "text", "text": "NULL"})
    return parts
