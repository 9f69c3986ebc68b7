"""Reference embeddings computed in the test process by plain transformers, one item at a time."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import AutoModel

from sie.catalog import load_catalog
from sie.model_location import resolve_weights_dir

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def minilm_dir() -> Path:
    return resolve_weights_dir(load_catalog().get(MINILM))


@cache
def _model(folder: str) -> torch.nn.Module:
    return AutoModel.from_pretrained(folder, local_files_only=True).eval()


@cache
def _tokenizer(folder: str, max_length: int) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer


def reference_embeddings(
    texts: list[str], folder: Path, *, max_length: int = 256, pooling: str = "mean", normalize: bool = True
) -> np.ndarray:
    model, tokenizer = _model(str(folder)), _tokenizer(str(folder), max_length)
    rows = []
    with torch.inference_mode():
        for text in texts:
            ids = torch.tensor([tokenizer.encode(text).ids])
            hidden = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
            vector = hidden.mean(0) if pooling == "mean" else hidden[0]
            if normalize:
                vector = torch.nn.functional.normalize(vector, dim=0)
            rows.append(vector.numpy())
    return np.stack(rows)


def token_count(texts: list[str], folder: Path, max_length: int = 256) -> int:
    tokenizer = _tokenizer(str(folder), max_length)
    return sum(len(tokenizer.encode(t).ids) for t in texts)
