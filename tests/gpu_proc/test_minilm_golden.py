"""Real all-MiniLM-L6-v2 weights through Batcher + Runner + DenseAdapter against golden values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from sie.catalog import BUILTIN_MODELS_DIR
from sie.gpu_proc.adapters import Adapter, load_adapter
from sie.gpu_proc.batcher import Batcher
from sie.gpu_proc.runner import Runner
from sie.model_config import load_model_file
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, TokenBatch

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "minilm.json").read_text())
CONFIG_FILE = BUILTIN_MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml"


@pytest.fixture(scope="module")
def minilm() -> tuple[Adapter, Tokenizer]:
    config = load_model_file(CONFIG_FILE)
    weights_dir = resolve_weights_dir(config)
    tokenizer = Tokenizer.from_file(str(weights_dir / "tokenizer.json"))
    tokenizer.enable_truncation(256)
    tokenizer.no_padding()
    return load_adapter(config, weights_dir, "cpu"), tokenizer


def embed(minilm: tuple[Adapter, Tokenizer], texts: list[str]) -> dict[str, np.ndarray]:
    """Normalized vectors by text, the way the device sees a request: one flat message, batched."""
    adapter, tokenizer = minilm
    encodings = tokenizer.encode_batch(texts)
    offsets = np.cumsum([0] + [len(e.ids) for e in encodings]).astype(np.int32)
    message = TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=offsets,
        input_ids=np.concatenate([e.ids for e in encodings]).astype(np.int32),
        token_type_ids=np.concatenate([e.type_ids for e in encodings]).astype(np.int8),
    )
    batcher = Batcher()
    assert batcher.try_add(message, source=0, now=0.0)
    batch = batcher.next_batch(0.0, idle=True)
    assert batch is not None
    rows = Runner(torch.device("cpu")).run_dense(adapter, batch)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return {texts[item.item_index]: row for item, row in zip(batch.items, rows, strict=True)}


def test_first_values_and_norm(minilm: tuple[Adapter, Tokenizer]) -> None:
    vectors = embed(minilm, [case["text"] for case in GOLDEN["vectors"]])
    for case in GOLDEN["vectors"]:
        vector = vectors[case["text"]]
        assert vector.shape == (384,)
        np.testing.assert_allclose(vector[:5], case["first"], rtol=0, atol=case["atol"])
        assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-6)


def test_cosines(minilm: tuple[Adapter, Tokenizer]) -> None:
    texts = sorted({text for case in GOLDEN["cosines"] for text in (case["a"], case["b"])})
    vectors = embed(minilm, texts)
    for case in GOLDEN["cosines"]:
        cosine = float(vectors[case["a"]] @ vectors[case["b"]])
        assert cosine == pytest.approx(case["value"], abs=case["atol"])
