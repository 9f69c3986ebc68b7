"""A tiny random-weight Florence-2 (DaViT vision tower + BART), in both folder layouts it is found in.

`make_florence2` writes transformers' own layout (florence-community: `Florence2ForConditionalGeneration`
keys, an `<image>` token, a processor config). `make_florence2_original` writes the same weights as
microsoft/Florence-2-* ship them for their remote code: `davit` vision config, the original module
names, `image_projection` as an [in, out] matrix, `final_logits_bias`, and a plain BART tokenizer
whose Florence tokens the remote processor adds at load. The renaming here is written from the
original modeling code's module tree, apart from the server's (`sie.gpu_proc.adapters.florence2_layout`).

The BPE vocabulary is trained here on a fixed corpus (the task prompts' words and a few labels).
The random decoder is shaped as Whisper's tiny model is (one hidden unit pinned to 1 reads a
per-token offset from the tied embeddings): special tokens never come, location tokens come often
enough to make boxes, and the end of text sometimes. The image token's logit is far below the
rest, so the native model's extra vocabulary row never changes what is generated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

IMAGE_SIDE = 96  # the processor's square; DaViT's four stages reduce it to 3 x 3 (+1 pooled token)
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
FLORENCE_TOKENS = [
    "<od>", "</od>", "<ocr>", "</ocr>", *(f"<loc_{i}>" for i in range(1000)),
    "<cap>", "</cap>", "<ncap>", "</ncap>", "<dcap>", "</dcap>", "<grounding>", "</grounding>",
    "<seg>", "</seg>", "<sep>", "<region_cap>", "</region_cap>", "<region_to_desciption>",
    "</region_to_desciption>", "<proposal>", "</proposal>", "<poly>", "</poly>", "<and>",
]  # fmt: skip
_CORPUS = [
    "What is the text in the image? What is the text in the image, with regions? What does the "
    "image describe? Describe in detail what is shown in the image. Describe with a paragraph what "
    "is shown in the image. Locate the objects with category name in the image. Locate the objects "
    "in the image, with their descriptions. Locate the region proposals in the image. Locate the "
    "phrases in the caption: What is the region? What does the region describe? What text is in "
    "the region? Locate in the image with mask",
    "a cat a dog the car red person total amount invoice date 42 cats dogs cars on in of and",
]
TEXT_CONFIG: dict[str, Any] = {
    "d_model": 32,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_ffn_dim": 64,
    "decoder_ffn_dim": 64,
    "max_position_embeddings": 128,
    "bos_token_id": 0,
    "pad_token_id": 1,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    "forced_eos_token_id": 2,
    "scale_embedding": False,
    "init_std": 0.3,  # wide, so different images and prompts give different tokens
}
# What microsoft's text_config carries for generation (its remote code's language model reads it).
GENERATION = {
    "forced_bos_token_id": 0,
    "forced_eos_token_id": 2,
    "no_repeat_ngram_size": 3,
    "early_stopping": True,
}
VISION_CONFIG: dict[str, Any] = {
    "depths": [1, 1, 1, 1],
    "embed_dim": [8, 16, 16, 32],
    "num_heads": [1, 2, 2, 4],
    "num_groups": [1, 2, 2, 4],
    "window_size": 2,  # the last stage's 3 x 3 map is padded to whole windows
    "projection_dim": 32,
    "drop_path_rate": 0.0,
}
LOC_OFFSET, EOS_OFFSET, NEVER = 0.3, 3.1, -30.0


def write_tokenizer(folder: Path, *, florence_tokens: bool) -> int:
    """A byte-level BPE with BART's special ids; with `florence_tokens`, the Florence tokens and
    `<image>` after it (as transformers' converted folders have). Returns the base vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(_CORPUS, trainer)
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer.add_special_tokens(["<mask>"])
    base = tokenizer.get_vocab_size(with_added_tokens=True)
    config: dict[str, Any] = {"model_max_length": 1024}
    if florence_tokens:
        tokenizer.add_special_tokens([*FLORENCE_TOKENS, "<image>"])
        config |= {
            "tokenizer_class": "BartTokenizer",
            "extra_special_tokens": {"image_token": "<image>"},
            **dict(zip(("bos_token", "pad_token", "eos_token", "unk_token"), SPECIALS, strict=True)),
            "mask_token": "<mask>",
        }
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return base


def make_florence2(folder: Path, seed: int = 0) -> Path:
    """transformers' layout: config, safetensors, tokenizer, image processor and processor config."""
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    base = write_tokenizer(folder, florence_tokens=True)
    image_token = base + len(FLORENCE_TOKENS)
    config = transformers.Florence2Config(
        vision_config=VISION_CONFIG,
        text_config={**TEXT_CONFIG, "vocab_size": image_token + 1},
        image_token_id=image_token,
    )
    torch.manual_seed(seed)
    model = transformers.Florence2ForConditionalGeneration(config).eval()
    shape_logits(model, base=base, image_token=image_token)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2, num_beams=3, **GENERATION
    )
    model.save_pretrained(folder)
    image_processor(image_seq_length=image_tokens()).save_pretrained(folder)
    processor = {"processor_class": "Florence2Processor", "post_processor_config": post_processor_config()}
    (folder / "processor_config.json").write_text(json.dumps(processor, indent=2))
    return folder


def image_processor(**extra: Any) -> Any:
    """The CLIP-style processor Florence-2 ships, at the tiny size (Pillow backend: no torchvision)."""
    import transformers

    side = {"height": IMAGE_SIDE, "width": IMAGE_SIDE}
    processor = transformers.CLIPImageProcessorPil(
        size=side,
        crop_size=side,
        do_center_crop=False,
        resample=3,
        image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225],
    )
    for key, value in extra.items():
        setattr(processor, key, value)
    return processor


def image_tokens() -> int:
    side = IMAGE_SIDE
    for stride in (4, 2, 2, 2):  # DaViT's patch embeddings (kernels 7, 3, 3, 3 padded to keep centres)
        side = (side - 1) // stride + 1
    return side * side + 1  # and the spatially pooled token


def post_processor_config(*, area_threshold: float | None = None) -> dict[str, Any]:
    """The processor's parse rules; every parse type must be named (transformers checks)."""
    ocr = {} if area_threshold is None else {"AREA_THRESHOLD": area_threshold}
    types = ("pure_text", "description_with_bboxes", "description_with_polygons", "polygons", "bboxes")
    return {
        "ocr": ocr,
        "phrase_grounding": {"banned_grounding_tokens": ["it", "the image", "a", "the"]},
        **{name: {} for name in (*types, "description_with_bboxes_or_polygons")},
    }


def shape_logits(model: Any, *, base: int, image_token: int) -> None:
    """One unit of the decoder's output pinned to 1; each token's tied embedding reads it as a
    logit offset: specials never, locations often, the end of text now and then."""
    import torch

    last = model.model.language_model.decoder.layers[-1].final_layer_norm
    with torch.no_grad():
        last.weight[0], last.bias[0] = 0.0, 1.0
        offsets = model.model.language_model.shared.weight[:, 0]
        offsets.zero_()
        offsets[[0, 1, 3, base - 1]] = NEVER  # <s>, <pad>, <unk>, <mask>
        offsets[2] = EOS_OFFSET
        offsets[base : base + 4] = NEVER  # <od> </od> <ocr> </ocr>
        offsets[base + 4 : base + 1004] = LOC_OFFSET
        offsets[base + 1004 : image_token] = NEVER
        offsets[image_token] = -1e4


# Native (transformers) name -> original (remote code) name, for the vision tower's blocks.
_BLOCK_NAMES = [
    (r"conv([12])\.", r"conv\1.fn.dw."),
    (r"norm1\.", "{attn}.norm."),
    (r"(window_attn|channel_attn)\.", r"\1.fn."),
    (r"norm2\.", "ffn.norm."),
    (r"ffn\.", "ffn.fn.net."),
]


def original_name(native: str) -> str | None:
    """Where a native key lives in microsoft's checkpoints (None: not stored there)."""
    if native.startswith("lm_head."):
        return "language_model." + native
    if native.startswith("model.language_model."):
        return "language_model.model." + native.removeprefix("model.language_model.")
    if native.startswith("model.multi_modal_projector."):
        rest = native.removeprefix("model.multi_modal_projector.")
        if rest == "image_projection.weight":
            return "image_projection"
        return rest.replace("image_position_embed.", "image_pos_embed.")
    convs = re.match(r"model\.vision_tower\.convs\.(\d+)\.conv\.(.*)", native)
    if convs:
        return f"vision_tower.convs.{convs[1]}.proj.{convs[2]}"
    if native.startswith("model.vision_tower.convs."):
        return native.removeprefix("model.")
    block = re.match(r"model\.vision_tower\.blocks\.(\d+)\.(\d+)\.(spatial|channel)_block\.(.*)", native)
    if block is None:
        raise ValueError(f"unexpected native key {native}")
    attn = "window_attn" if block[3] == "spatial" else "channel_attn"
    rest = block[4]
    for pattern, replacement in _BLOCK_NAMES:
        if re.match(pattern, rest):
            rest = re.sub(pattern, replacement.replace("{attn}", attn), rest, count=1)
            break
    return f"vision_tower.blocks.{block[1]}.{block[2]}.{block[3]}_block.{rest}"


def make_florence2_original(folder: Path, native: Path, *, weights: str = "bin") -> Path:
    """microsoft's layout of the weights in `native` (a `make_florence2` folder): pytorch_model.bin
    (or model.safetensors), a davit config, the plain tokenizer and preprocessor_config.json."""
    import torch
    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True, exist_ok=True)
    base = write_tokenizer(folder, florence_tokens=False)
    vocab = base + len(FLORENCE_TOKENS)  # the remote processor's tokens; no <image>
    state = load_file(str(native / "model.safetensors"))
    shared = state["model.language_model.shared.weight"][:vocab].clone()
    renamed = {
        name: tensor.clone() for key, tensor in state.items() if (name := original_name(key)) is not None
    }
    renamed["image_projection"] = renamed["image_projection"].t().contiguous()
    for key in (
        "model.shared.weight",
        "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight",
    ):
        renamed[f"language_model.{key}"] = shared.clone()
    renamed["language_model.lm_head.weight"] = shared.clone()
    renamed["language_model.final_logits_bias"] = torch.zeros(1, vocab)
    if weights == "bin":
        torch.save(renamed, folder / "pytorch_model.bin")
    else:
        save_file(renamed, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(original_config(vocab), indent=2))
    preprocessor = image_processor(image_seq_length=image_tokens()).to_dict()
    preprocessor |= {"auto_map": {"AutoProcessor": "processing_florence2.Florence2Processor"}}
    preprocessor |= {"processor_class": "Florence2Processor", "image_processor_type": "CLIPImageProcessor"}
    (folder / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({"num_beams": 3, "early_stopping": False}))
    return folder


def original_config(vocab: int) -> dict[str, Any]:
    """config.json as microsoft's remote code reads it."""
    text = {k: v for k, v in TEXT_CONFIG.items() if k != "init_std"}
    vision = VISION_CONFIG
    return {
        "architectures": ["Florence2ForConditionalGeneration"],
        "auto_map": {
            "AutoConfig": "configuration_florence2.Florence2Config",
            "AutoModelForCausalLM": "modeling_florence2.Florence2ForConditionalGeneration",
        },
        "model_type": "florence2",
        "bos_token_id": 0,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "projection_dim": vision["projection_dim"],
        "vocab_size": vocab,
        "is_encoder_decoder": True,
        "torch_dtype": "float32",
        "text_config": {
            **text,
            **GENERATION,
            "vocab_size": vocab,
            "num_beams": 3,
            "output_attentions": True,
            "activation_function": "gelu",
            "is_encoder_decoder": True,
        },
        "vision_config": {
            "model_type": "davit",
            "drop_path_rate": 0.1,
            "patch_size": [7, 3, 3, 3],
            "patch_stride": [4, 2, 2, 2],
            "patch_padding": [3, 1, 1, 1],
            "patch_prenorm": [False, True, True, True],
            "enable_checkpoint": False,
            "dim_embed": vision["embed_dim"],
            "num_heads": vision["num_heads"],
            "num_groups": vision["num_groups"],
            "depths": vision["depths"],
            "window_size": vision["window_size"],
            "projection_dim": vision["projection_dim"],
            "visual_temporal_embedding": {"type": "COSINE", "max_temporal_embeddings": 100},
            "image_pos_embed": {"type": "learned_abs_2d", "max_pos_embeddings": 50},
            "image_feature_source": ["spatial_avg_pool", "temporal_avg_pool"],
        },
    }


def model_yaml_florence2(sie_id: str, folder: Path, task: str = "<OD>") -> dict[str, Any]:
    """SIE's profile for Florence-2 (its runtime task and generation settings)."""
    runtime = {"task": task, "max_new_tokens": 24, "num_beams": 1}
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "inputs": {"text": True, "image": True},
        "tasks": {"extract": {}},
        "profiles": {"default": {"adapter": "florence2", "adapter_options": {"runtime": runtime}}},
    }


def reference_processor(folder: Path, *, original: bool = False) -> Any:
    """transformers' Florence2Processor for a folder. microsoft's folders need the remote
    processor, which adds the Florence tokens at load: here they are added the same way, and the
    native processor's `<image>` after them; their parse rules are that processor's (OCR lines
    under 1% of the image dropped, its banned grounding phrases)."""
    import transformers

    from sie.frontend.florence2_parse import ORIGINAL_BANNED

    images = transformers.CLIPImageProcessorPil.from_pretrained(folder)
    images.image_seq_length = image_tokens()
    if not original:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        rules = json.loads((folder / "processor_config.json").read_text())["post_processor_config"]
        return transformers.Florence2Processor(images, tokenizer, post_processor_config=rules)
    tokenizer = transformers.BartTokenizer(tokenizer_file=str(folder / "tokenizer.json"))
    tokenizer.add_special_tokens({"additional_special_tokens": FLORENCE_TOKENS})
    tokenizer.add_special_tokens(
        {"additional_special_tokens": ["<image>"]}, replace_extra_special_tokens=False
    )
    tokenizer.image_token, tokenizer.image_token_id = "<image>", tokenizer.convert_tokens_to_ids("<image>")
    rules = post_processor_config(area_threshold=0.01)
    rules["phrase_grounding"] = {"banned_grounding_tokens": sorted(ORIGINAL_BANNED)}
    return transformers.Florence2Processor(images, tokenizer, post_processor_config=rules)


def reference_model(native: Path) -> Any:
    """The native model on the native folder (an original-layout folder holds the same weights)."""
    import transformers

    return transformers.Florence2ForConditionalGeneration.from_pretrained(native).eval()


def reference_generate(
    processor: Any, model: Any, image: bytes, prompt: str, *, max_new_tokens: int, num_beams: int
) -> tuple[list[int], tuple[int, int]]:
    """Generated ids for one image (no batch, no padding) and the image's (width, height)."""
    import io

    import torch
    from PIL import Image

    picture = Image.open(io.BytesIO(image))  # the processor converts to RGB (alpha onto white)
    inputs = processor(text=prompt, images=picture, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, num_beams=num_beams, do_sample=False)
    return out[0].tolist(), picture.size


def reference_answer(processor: Any, ids: list[int], task: str, size: tuple[int, int]) -> Any:
    """batch_decode (special tokens kept) and post_process_generation: the task's parsed answer."""
    text = processor.batch_decode([ids], skip_special_tokens=False)[0]
    return processor.post_process_generation(text, task=task, image_size=size)[task]
