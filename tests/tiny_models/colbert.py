"""A tiny random-weight ColBERT model (BERT encoder + bias-free projection) saved as PyLate saves one.

The tokenizer is MiniLM's (BERT WordPiece, vocab 30522) so real text tokenizes; the markers are
`[unused0]` / `[unused1]` as in answerai-colbert-small. `layout="stanford"` saves the Stanford-NLP
form instead: one model.safetensors holding `bert.*` and `linear.weight`, plus artifact.metadata.
"""

from __future__ import annotations

import json
import shutil
import string
from pathlib import Path
from typing import Any, Literal

from sie.catalog import BUILTIN_MODELS_DIR
from sie.model_config import load_model_file
from sie.model_location import resolve_weights_dir

# Read only MiniLM's YAML: the built-in catalog also holds models this tokenizer has nothing to do with.
MINILM_YAML = BUILTIN_MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml"
HIDDEN, TOKEN_DIM = 32, 16
QUERY_LENGTH, DOCUMENT_LENGTH = 32, 180
PYLATE_CONFIG: dict[str, Any] = {
    "query_prefix": "[unused0]",
    "document_prefix": "[unused1]",
    "query_length": QUERY_LENGTH,
    "document_length": DOCUMENT_LENGTH,
    "attend_to_expansion_tokens": False,
    "skiplist_words": list(string.punctuation),
    "do_query_expansion": True,
    "similarity_fn_name": "MaxSim",
}


def make_colbert(
    folder: Path, seed: int = 0, *, layout: Literal["pylate", "stanford"] = "pylate", bias: bool = False
) -> Path:
    """Write config, weights and tokenizer files of a tiny ColBERT model into `folder`."""
    import torch
    import transformers
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    model = transformers.BertModel(config)
    projection = torch.nn.Linear(HIDDEN, TOKEN_DIM, bias=bias)
    write_tokenizer(folder)
    if layout == "pylate":
        model.save_pretrained(folder)
        dense = folder / "1_Dense"
        dense.mkdir(exist_ok=True)
        save_file(
            {f"linear.{k}": v.detach().contiguous() for k, v in projection.state_dict().items()},
            dense / "model.safetensors",
        )
        _write_json(dense / "config.json", _dense_config(bias))
        _write_json(folder / "modules.json", _MODULES)
        _write_json(
            folder / "sentence_bert_config.json",
            {"max_seq_length": DOCUMENT_LENGTH - 1, "do_lower_case": False},
        )
        write_pylate_config(folder)
    else:
        config.architectures = ["HF_ColBERT"]
        config.save_pretrained(folder)
        state = {f"bert.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
        state["linear.weight"] = projection.weight.detach().contiguous()
        save_file(state, folder / "model.safetensors")
        meta = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": QUERY_LENGTH}
        _write_json(folder / "artifact.metadata", {**meta, "doc_maxlen": DOCUMENT_LENGTH})
    return folder


def model_yaml_colbert(sie_id: str, folder: Path) -> dict[str, Any]:
    """The model YAML mapping the server loads the tiny model with (settings come from the folder)."""
    return {
        "sie_id": sie_id,
        "weights": {"path": str(folder)},
        "tasks": {"encode": {"multivector": {"dim": TOKEN_DIM}}},
        "adapter": "colbert",
    }


def write_tokenizer(folder: Path, added_tokens: tuple[str, ...] = ()) -> Path:
    """MiniLM's tokenizer files, without its fixed padding and truncation, plus `added_tokens`."""
    from tokenizers import Tokenizer

    source = resolve_weights_dir(load_model_file(MINILM_YAML))
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    if added_tokens:
        tokenizer.add_tokens(list(added_tokens))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


def write_pylate_config(folder: Path, **overrides: Any) -> Path:
    """PyLate's config_sentence_transformers.json (prefixes, lengths, expansion, skiplist)."""
    _write_json(folder / "config_sentence_transformers.json", {**PYLATE_CONFIG, **overrides})
    return folder


_MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
    {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"},
]


def _dense_config(bias: bool) -> dict[str, Any]:
    return {
        "in_features": HIDDEN,
        "out_features": TOKEN_DIM,
        "bias": bias,
        "activation_function": "torch.nn.modules.linear.Identity",
        "use_residual": False,
    }


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2))
