"""A tiny random-weight Donut (DonutSwin encoder, MBart decoder), built offline.

The tokenizer is XLM-RoBERTa-shaped, as Donut's: a SentencePiece Unigram vocabulary of a few
pieces with <s> 0, <pad> 1, </s> 2, <unk> 3, Metaspace pre-tokenization, and Donut's task and
field tags added as special tokens (<s_cord-v2>, <s_docvqa>, <s_question>, <s_nm>, <sep/>, ...),
so a random generation is full of tags for token2json to parse. The image processor pads to a
small portrait page so a forward on CPU takes milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
TASKS = ["<s_cord-v2>", "<s_docvqa>", "<s_rvlcdip>"]
FIELDS = ["question", "answer", "menu", "nm", "cnt", "price", "total", "total_price", "class"]
CATEGORIES = ["<sep/>", "<receipt/>", "<form/>"]
WORDS = ["▁total", "▁price", "▁cash", "▁what", "▁is", "▁the", "▁tea", "▁ice", "▁cream", "▁1", "▁2", "."]
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"
PAGE_HEIGHT, PAGE_WIDTH = 40, 32  # the processor's `size`: every page is padded to it
MAX_POSITIONS = 48  # the decoder's positions: a prompt and its generation fit in them
HIDDEN = 32
INIT_STD = 0.3
TAG_SCALE, EOS_SCALE = 2.5, 1.5


def added_tags() -> list[str]:
    """Donut's added tokens: task starts, each field's start and end, categorical values."""
    fields = [tag for name in FIELDS for tag in (f"<s_{name}>", f"</s_{name}>")]
    return [*TASKS, *fields, *CATEGORIES]


def write_tokenizer(folder: Path) -> int:
    """tokenizer.json and tokenizer_config.json of an XLM-R Unigram tokenizer; the vocabulary size."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import Unigram

    pieces = [(s, 0.0) for s in SPECIALS]
    pieces += [(w, -2.0) for w in WORDS] + [("▁", -3.0)]
    pieces += [(c, -4.0) for c in LETTERS] + [(f"▁{c}", -4.5) for c in LETTERS]
    pieces.append(("<mask>", 0.0))
    tokenizer = Tokenizer(Unigram(pieces, unk_id=3, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    tokenizer.add_special_tokens([*SPECIALS, "<mask>", *added_tags()])
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "XLMRobertaTokenizer",
        "model_max_length": MAX_POSITIONS,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "sep_token": "</s>",
        "cls_token": "<s>",
        "mask_token": "<mask>",
        "additional_special_tokens": added_tags(),
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return int(tokenizer.get_vocab_size())


def make_donut(folder: Path, seed: int = 0) -> Path:
    """Write config, safetensors weights, tokenizer and image processor config into `folder`."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_tokenizer(folder)
    encoder = transformers.DonutSwinConfig(
        image_size=[PAGE_HEIGHT, PAGE_WIDTH],
        patch_size=4,
        embed_dim=HIDDEN // 2,
        depths=[1, 1],
        num_heads=[1, 2],
        window_size=4,
    )
    decoder = transformers.MBartConfig(
        vocab_size=vocab_size,
        d_model=HIDDEN,
        decoder_layers=2,
        decoder_attention_heads=2,
        decoder_ffn_dim=64,
        encoder_layers=2,  # the cache sizes itself by it (num_hidden_layers), as Donut's 12 >= 4
        max_position_embeddings=MAX_POSITIONS,
        scale_embedding=True,
        add_final_layer_norm=True,
        is_decoder=True,
        add_cross_attention=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        tie_word_embeddings=False,
        init_std=INIT_STD,
    )
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.pad_token_id = 1
    config.decoder_start_token_id = 0
    torch.manual_seed(seed)
    model = transformers.VisionEncoderDecoderModel(config=config).eval()
    with torch.no_grad():  # favour tags and the end token, so generations parse and end early
        head = model.decoder.lm_head.weight
        head[vocab_size - len(added_tags()) :].mul_(TAG_SCALE)
        head[2].mul_(EOS_SCALE)
    model.save_pretrained(folder)
    transformers.DonutImageProcessorPil(size={"height": PAGE_HEIGHT, "width": PAGE_WIDTH}).save_pretrained(
        folder
    )
    return folder


def model_yaml_donut(sie_id: str, folder: Path, task: str = "<s_cord-v2>") -> dict[str, Any]:
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": False, "image": True},
        "tasks": {"extract": {}},
        "profiles": {
            "default": {
                "adapter": "donut",
                "adapter_options": {"runtime": {"task": task, "max_new_tokens": 16, "num_beams": 1}},
            }
        },
    }


def reference(folder: Path) -> tuple[Any, Any]:
    """transformers' own processor and model for the folder (float32, eval)."""
    import transformers

    processor = transformers.DonutProcessor(
        image_processor=transformers.DonutImageProcessorPil.from_pretrained(folder),
        tokenizer=transformers.AutoTokenizer.from_pretrained(folder),
    )
    model = transformers.VisionEncoderDecoderModel.from_pretrained(folder).eval()
    return processor, model
