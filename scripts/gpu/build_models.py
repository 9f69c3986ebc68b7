"""Random-weight models of real shapes, built from their configs on the spot (no weights travel).

    python scripts/gpu/build_models.py OUT_DIR [--tiny] [--device cuda] [--tokenizer-dir DIR]

Writes OUT_DIR/<name>/ (config.json, model.safetensors, tokenizer files) and OUT_DIR/models/ with
one YAML per model and compute precision (`gpu/<name>.<precision>`), and prints a JSON list of the
models. The shapes are those of all-MiniLM-L6-v2, bge-base-en-v1.5, Qwen3-Embedding-0.6B, CLIP
ViT-B/32 and Qwen3-Reranker-0.6B (Qwen3-0.6B's causal LM, scored from its yes/no logits);
`--tiny` keeps the architectures at a few thousand parameters (the CPU rehearsal).

Text models share all-MiniLM-L6-v2's WordPiece tokenizer (its files are a few hundred KiB and
travel with the kit; the Qwen3 BPE's 11 MB do not), so token counts are a WordPiece's: close to the
real tokenizers' on English. CLIP gets a byte-level BPE on a minimal vocabulary and CLIP's image
processor settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


# Shapes (config.json keywords) of the real models, and the tiny stand-ins of the CPU rehearsal.
MINILM_L6 = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}
BGE_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
QWEN3_06B = {
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
}
# Qwen3-Reranker-0.6B's options in SIE's catalog; "yes" and "no" are single WordPiece tokens too.
RERANKER_LOADTIME = {"yes_token": "yes", "no_token": "no", "score_mode": "log_softmax"}
RERANKER_RUNTIME = {"input_format": "qwen3"}
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
TINY_QWEN3 = {**TINY, "num_key_value_heads": 2, "head_dim": 8}


def text_models(tiny: bool) -> dict[str, dict[str, Any]]:
    """name -> architecture, config keywords, pooling and max length (as the real model's YAML)."""
    return {
        "minilm-l6": {
            "arch": "bert",
            "config": TINY if tiny else MINILM_L6,
            "pooling": "mean",
            "max_length": 256,
        },
        "bge-base": {
            "arch": "bert",
            "config": TINY if tiny else BGE_BASE,
            "pooling": "cls",
            "max_length": 512,
        },
        "qwen3-embedding-0.6b": {
            "arch": "qwen3",
            "config": TINY_QWEN3 if tiny else QWEN3_06B,
            "pooling": "last",
            "max_length": 8192,
        },
    }


def build_text(folder: Path, spec: dict[str, Any], tokenizer_dir: Path, device: str) -> int:
    import transformers

    if spec["arch"] == "bert":
        config: Any = transformers.BertConfig(vocab_size=30522, max_position_embeddings=512, **spec["config"])
    else:
        config = _qwen3_config(spec["config"])
    _save(transformers.AutoModel, config, folder, device)
    _copy_tokenizer(tokenizer_dir, folder)
    return int(config.hidden_size)


def build_reranker(folder: Path, tiny: bool, tokenizer_dir: Path, device: str) -> None:
    """Qwen3-Reranker-0.6B's shape: Qwen3-0.6B's causal LM, scored from its yes/no logits."""
    import transformers

    _save(transformers.AutoModelForCausalLM, _qwen3_config(TINY_QWEN3 if tiny else QWEN3_06B), folder, device)
    _copy_tokenizer(tokenizer_dir, folder)


def _qwen3_config(shape: dict[str, Any]) -> Any:
    import transformers

    return transformers.Qwen3Config(
        vocab_size=151669, max_position_embeddings=32768, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, eos_token_id=151643, pad_token_id=151643, **shape,
    )  # fmt: skip


def _copy_tokenizer(tokenizer_dir: Path, folder: Path) -> None:
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, folder / name)


def build_clip(folder: Path, tiny: bool, device: str) -> int:
    import transformers

    from tests.tiny_models.clip import write_clip_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_clip_tokenizer(folder)
    text = {"hidden_size": 512, "num_hidden_layers": 12, "num_attention_heads": 8, "intermediate_size": 2048}
    vision = {
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
    }
    if tiny:
        text = vision = {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "intermediate_size": 64,
        }
    image_size, projection = (64, 16) if tiny else (224, 512)
    config = transformers.CLIPConfig(
        text_config={**text, "vocab_size": vocab, "max_position_embeddings": 77, "eos_token_id": vocab - 1,
                     "bos_token_id": vocab - 2, "pad_token_id": vocab - 1},
        vision_config={**vision, "image_size": image_size, "patch_size": 16 if tiny else 32},
        projection_dim=projection,
    )  # fmt: skip
    _save(transformers.AutoModel, config, folder, device)  # CLIPModel
    processor = {
        "image_processor_type": "CLIPImageProcessor",
        "do_resize": True,
        "size": {"shortest_edge": image_size},
        "do_center_crop": True,
        "crop_size": {"height": image_size, "width": image_size},
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "do_convert_rgb": True,
        "resample": 3,
    }
    (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
    return projection


def _save(auto: Any, config: Any, folder: Path, device: str) -> None:
    """Random weights (transformers' own init), built on `device` in bfloat16, saved as safetensors."""
    import torch

    torch.manual_seed(0)
    with torch.device(device):
        model = auto.from_config(config, dtype=torch.bfloat16)
    model.eval().save_pretrained(folder)
    del model


def build(out: Path, tiny: bool, device: str, tokenizer_dir: Path) -> list[dict[str, Any]]:
    models_dir = out / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    precisions = ["float16", "bfloat16"] if device.startswith("cuda") else ["float32", "bfloat16"]
    built: list[dict[str, Any]] = []
    for name, spec in text_models(tiny).items():
        dim = build_text(out / name, spec, tokenizer_dir, device)
        runtime = {"pooling": spec["pooling"], "normalize": True}
        built += _yamls(
            models_dir, name, out / name, "dense", dim, spec["max_length"], runtime, precisions, "text"
        )
    build_reranker(out / "qwen3-reranker-0.6b", tiny, tokenizer_dir, device)
    built += _yamls(models_dir, "qwen3-reranker-0.6b", out / "qwen3-reranker-0.6b", "llm_reranker", 0, 8192,
                    RERANKER_RUNTIME, precisions, "score", loadtime=RERANKER_LOADTIME)  # fmt: skip
    dim = build_clip(out / "clip-vit-b32", tiny, device)
    built += _yamls(models_dir, "clip-vit-b32", out / "clip-vit-b32", "clip", dim, 77, {"normalize": True},
                    precisions, "image")  # fmt: skip
    return built


def _yamls(
    models_dir: Path,
    name: str,
    folder: Path,
    family: str,
    dim: int,
    max_length: int,
    runtime: dict[str, Any],
    precisions: list[str],
    kind: str,
    loadtime: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    made = []
    tasks = {"score": {}} if kind == "score" else {"encode": {"dense": {"dim": dim}}}
    options: dict[str, Any] = {"runtime": runtime, **({"loadtime": loadtime} if loadtime else {})}
    for precision in precisions:
        sie_id = f"gpu/{name}.{precision}"
        body = {
            "sie_id": sie_id,
            "weights": {"path": str(folder)},
            "inputs": {"text": True, "image": kind == "image"},
            "tasks": tasks,
            "max_sequence_length": max_length,
            "profiles": {
                "default": {"adapter": family, "compute_precision": precision, "adapter_options": options}
            },
        }
        (models_dir / f"{name}.{precision}.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
        made.append({"id": sie_id, "name": name, "folder": str(folder), "precision": precision, "kind": kind,
                     "pooling": runtime.get("pooling"), "max_length": max_length})  # fmt: skip
    return made


def default_tokenizer_dir() -> Path:
    """The kit's copy of MiniLM's tokenizer (scripts/gpu/prepare.sh), else the built-in model's files."""
    kit = REPO / ".gpu-wheels" / "tokenizer"
    if (kit / "tokenizer.json").is_file():
        return kit
    from sie.catalog import load_catalog
    from sie.model_location import resolve_weights_dir
    from sie.settings import DEFAULT_MODEL

    return resolve_weights_dir(load_catalog().get(DEFAULT_MODEL))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tokenizer-dir", type=Path)
    args = parser.parse_args()
    built = build(args.out, args.tiny, args.device, args.tokenizer_dir or default_tokenizer_dir())
    print(json.dumps(built))
    return 0


if __name__ == "__main__":
    sys.exit(main())
