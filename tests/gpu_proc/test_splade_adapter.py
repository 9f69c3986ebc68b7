"""SpladeAdapter + Runner against transformers' masked LM and the SPLADE formula written out."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from sie.catalog import load_catalog
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.splade import SpladeAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.splade import VOCAB_SIZE, make_splade, model_yaml_splade

CPU = torch.device("cpu")
ATOL = 1e-4
TEXTS = [
    "what causes high blood pressure",
    "The quick brown fox jumps over the lazy dog.",
    "hi",
    "Aspirin lowers the risk of stroke in patients with atrial fibrillation, a large trial found.",
    "blood blood blood pressure",
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def tiny_splade(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_splade(tmp_path_factory.mktemp("splade"))


def load(folder: Path) -> SpladeAdapter:
    config = parse_model_config(model_yaml_splade("tiny/splade", folder))
    adapter = load_adapter(config, folder, "cpu")
    assert isinstance(adapter, SpladeAdapter)
    return adapter


def tokenize(folder: Path, texts: list[str]) -> list[np.ndarray]:
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128
    return [np.asarray(e.ids, np.int32) for e in tokenizer.encode_batch(texts)]


def random_items(n: int, seed: int, max_len: int = 40) -> list[np.ndarray]:
    """[CLS] random word pieces [SEP], so the items look like the tokenizer's output."""
    rng = np.random.default_rng(seed)
    return [
        np.concatenate([[101], rng.integers(1000, VOCAB_SIZE, rng.integers(0, max_len - 1)), [102]]).astype(
            np.int32
        )
        for _ in range(n)
    ]


def sparse_batch(items: list[np.ndarray], is_query: bool = False) -> Batch:
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0) for i, ids in enumerate(items)]
    key = GroupKey(0, int(Op.ENCODE), mask_of({ResultKind.SPARSE}), 0, int(is_query))
    lengths = [len(ids) for ids in items]
    return Batch(key, pending, sum(lengths), max(lengths), 0.0)


def run(adapter: SpladeAdapter, items: list[np.ndarray], is_query: bool = False) -> Output:
    outputs = Runner(CPU).run(adapter, sparse_batch(items, is_query))
    assert set(outputs) == {ResultKind.SPARSE}
    return outputs[ResultKind.SPARSE]


def densify(output: Output, vocab: int = VOCAB_SIZE) -> np.ndarray:
    assert output.row_offsets is not None and output.indices is not None
    dense = np.zeros((output.n_items, vocab), np.float32)
    for i in range(output.n_items):
        rows = slice(output.row_offsets[i], output.row_offsets[i + 1])
        dense[i, output.indices[rows]] = output.values[rows]
    return dense


def reference(folder: Path, items: list[np.ndarray]) -> np.ndarray:
    """transformers' masked LM, one item at a time, no padding, eager attention; SPLADE by hand."""
    model = transformers.AutoModelForMaskedLM.from_pretrained(folder, attn_implementation="eager").eval()
    rows = []
    with torch.no_grad():
        for ids in items:
            logits = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).logits[0]
            rows.append(torch.log1p(torch.relu(logits)).max(dim=0).values)
    result: np.ndarray = torch.stack(rows).numpy()
    return result


def test_matches_masked_lm_and_the_formula(tiny_splade: Path) -> None:
    items = tokenize(tiny_splade, TEXTS) + random_items(8, seed=1)
    got, want = densify(run(load(tiny_splade), items)), reference(tiny_splade, items)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    # The tiny model's head is shifted so that a few hundred terms per item survive, as in SPLADE.
    assert (want > 0).sum(axis=1).min() > 50 and (want > 0).sum(axis=1).max() < VOCAB_SIZE // 10


def test_output_layout(tiny_splade: Path) -> None:
    items = tokenize(tiny_splade, TEXTS)
    output = run(load(tiny_splade), items)
    assert output.kind == ResultKind.SPARSE and output.n_items == len(items) and output.dim == 1
    assert output.row_offsets is not None and output.indices is not None
    assert output.row_offsets.dtype == np.int64 and output.row_offsets[0] == 0
    assert output.values.dtype == np.float32 and output.values.ndim == 1
    assert output.indices.dtype == np.int32 and len(output.indices) == len(output.values)
    assert (output.values > 0).all()
    for i in range(len(items)):
        indices = output.indices[output.row_offsets[i] : output.row_offsets[i + 1]]
        assert len(indices) > 0 and (np.diff(indices) > 0).all()
        assert indices[0] >= 0 and indices[-1] < VOCAB_SIZE


def test_batch_equals_single_in_any_order(tiny_splade: Path) -> None:
    adapter = load(tiny_splade)
    items = random_items(30, seed=2, max_len=60)
    items.append(items[3].copy())  # a duplicate
    singles = np.concatenate([densify(run(adapter, [ids])) for ids in items])
    assert np.array_equal(singles[3], singles[30])
    order = np.random.default_rng(3).permutation(len(items))
    shuffled = densify(run(adapter, [items[i] for i in order]))
    np.testing.assert_allclose(shuffled, singles[order], rtol=0, atol=ATOL)
    # The picked items of a ragged batch output are those items' own terms.
    picked = run(adapter, items).take([30, 0, 3])
    np.testing.assert_allclose(densify(picked), singles[[30, 0, 3]], rtol=0, atol=ATOL)


def test_queries_and_documents_encode_alike(tiny_splade: Path) -> None:
    adapter, items = load(tiny_splade), tokenize(tiny_splade, TEXTS)
    as_query, as_doc = run(adapter, items, is_query=True), run(adapter, items)
    assert np.array_equal(as_query.indices, as_doc.indices)  # type: ignore[arg-type]
    np.testing.assert_array_equal(as_query.values, as_doc.values)


def test_adapter_facts_and_close(tiny_splade: Path) -> None:
    adapter = load(tiny_splade)
    assert (adapter.name, adapter.vocab_size, adapter.pad_token_id, adapter.dtype) == (
        "tiny/splade",
        VOCAB_SIZE,
        0,
        torch.float32,
    )
    assert adapter.kinds == frozenset({ResultKind.SPARSE})
    model = adapter._model
    assert model is not None and not model.training
    expected = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert adapter.memory_bytes() == expected > 0
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        adapter.term_weights(torch.ones(1, 1, dtype=torch.long), torch.ones(1, 1, dtype=torch.long), None)


@pytest.mark.skipif(importlib.util.find_spec("cognition") is None, reason="SPLADE-tiny weights not installed")
def test_builtin_splade_tiny_reference_terms() -> None:
    config = load_catalog().get("sie/splade-tiny")
    assert config.tasks.encode is not None and config.tasks.encode.sparse is not None
    assert config.tasks.encode.sparse.dim == VOCAB_SIZE and config.max_sequence_length == 512
    folder = resolve_weights_dir(config)
    adapter = load_adapter(config, folder, "cpu")
    assert isinstance(adapter, SpladeAdapter) and adapter.vocab_size == VOCAB_SIZE
    output = run(adapter, tokenize(folder, ["what causes high blood pressure"]), is_query=True)
    assert output.indices is not None
    top = output.indices[np.argsort(-output.values, kind="stable")[:5]]
    vocab = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert [vocab.id_to_token(int(i)) for i in top] == ["pressure", "causes", "cause", "blood", "high"]
