"""DenseAdapter + Runner against plain transformers, for each architecture and pooling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.dense import DenseAdapter
from sie.gpu_proc.batcher import Batch, Batcher
from sie.gpu_proc.runner import Runner
from sie.shm.layout import Op, TokenBatch

from .tiny import ARCHS, as_batch, model_config, random_items

POOLINGS = ["cls", "mean", "last"]
CPU = torch.device("cpu")
ATOL = 1e-5

pytestmark = pytest.mark.usefixtures("deterministic_torch")


def load(tiny_models: dict[str, Path], arch: str, pooling: str = "mean") -> DenseAdapter:
    adapter = load_adapter(model_config(arch, pooling), tiny_models[arch], "cpu")
    assert isinstance(adapter, DenseAdapter)
    return adapter


def reference(
    folder: Path, items: list[np.ndarray], pooling: str, types: list[np.ndarray] | None = None
) -> np.ndarray:
    """Plain transformers, one item at a time, no padding, eager attention, pooling written out."""
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    rows = []
    with torch.no_grad():
        for i, ids in enumerate(items):
            kwargs: dict[str, torch.Tensor] = {"input_ids": torch.from_numpy(ids.astype(np.int64))[None]}
            if types is not None:
                kwargs["token_type_ids"] = torch.from_numpy(types[i].astype(np.int64))[None]
            hidden = model(**kwargs).last_hidden_state[0]
            rows.append({"cls": hidden[0], "mean": hidden.mean(dim=0), "last": hidden[-1]}[pooling])
    result: np.ndarray = torch.stack(rows).numpy()
    return result


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() <= ATOL
    cosine = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosine.min() >= 0.99999


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("arch", ARCHS)
def test_matches_plain_transformers(tiny_models: dict[str, Path], arch: str, pooling: str) -> None:
    items = random_items(12, seed=1)
    got = Runner(CPU).run_dense(load(tiny_models, arch, pooling), as_batch(items))
    assert_close(got, reference(tiny_models[arch], items, pooling))


@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("arch", ARCHS)
def test_batch_equals_single_in_any_order(tiny_models: dict[str, Path], arch: str, pooling: str) -> None:
    adapter, runner = load(tiny_models, arch, pooling), Runner(CPU)
    items = random_items(63, seed=2)
    items.append(items[5].copy())  # a duplicate
    singles = np.concatenate([runner.run_dense(adapter, as_batch([ids])) for ids in items])
    assert np.array_equal(singles[5], singles[63])
    order = np.random.default_rng(3).permutation(len(items))
    shuffled = runner.run_dense(adapter, as_batch([items[i] for i in order]))
    np.testing.assert_allclose(shuffled, singles[order], rtol=0, atol=ATOL)
    formed = batch_through_batcher(items)
    rows = runner.run_dense(adapter, formed)
    np.testing.assert_allclose(rows, singles[[item.item_index for item in formed.items]], rtol=0, atol=ATOL)


def batch_through_batcher(items: list[np.ndarray]) -> Batch:
    offsets = np.concatenate([[0], np.cumsum([len(ids) for ids in items])]).astype(np.int32)
    message = TokenBatch(
        req_id=1, op=Op.ENCODE, model_slot=0, offsets=offsets, input_ids=np.concatenate(items)
    )
    batcher = Batcher()
    assert batcher.try_add(message, source=0, now=0.0)
    batch = batcher.next_batch(0.0, idle=True)
    assert batch is not None and len(batch.items) == len(items)
    return batch


def test_bert_uses_token_types(tiny_models: dict[str, Path]) -> None:
    items = random_items(8, seed=4)
    types = [(np.arange(len(ids)) >= len(ids) // 2).astype(np.int8) for ids in items]
    runner, adapter = Runner(CPU), load(tiny_models, "bert")
    with_types = runner.run_dense(adapter, as_batch(items, types))
    assert_close(with_types, reference(tiny_models["bert"], items, "mean", types))
    assert not np.allclose(with_types, runner.run_dense(adapter, as_batch(items)))


def test_items_without_types_get_type_zero_beside_items_with_them(tiny_models: dict[str, Path]) -> None:
    items = random_items(4, seed=5)
    types: list[np.ndarray | None] = [None, np.ones(len(items[1]), np.int8), None, None]
    got = Runner(CPU).run_dense(load(tiny_models, "bert"), as_batch(items, types))
    zeros = [np.zeros(len(ids), np.int8) if t is None else t for ids, t in zip(items, types, strict=True)]
    assert_close(got, reference(tiny_models["bert"], items, "mean", zeros))


def test_roberta_ignores_token_types(tiny_models: dict[str, Path]) -> None:
    items = random_items(6, seed=6)
    types = [np.ones(len(ids), np.int8) for ids in items]  # would index past a 1-row type table
    runner, adapter = Runner(CPU), load(tiny_models, "roberta")
    assert adapter.pad_token_id == 1
    np.testing.assert_array_equal(
        runner.run_dense(adapter, as_batch(items, types)), runner.run_dense(adapter, as_batch(items))
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_adapter_facts_and_close(tiny_models: dict[str, Path], arch: str) -> None:
    adapter = load(tiny_models, arch)
    assert (adapter.name, adapter.dim, adapter.device, adapter.dtype) == (
        f"tiny/{arch}",
        32,
        CPU,
        torch.float32,
    )
    model = adapter._model
    assert model is not None and not model.training
    expected = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert adapter.memory_bytes() == expected > 0
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        Runner(CPU).run(adapter, as_batch([np.array([5, 6], np.int32)]))


def test_cpu_ignores_half_precision_profiles(tiny_models: dict[str, Path]) -> None:
    config = model_config("bert", compute_precision="float16")
    assert load_adapter(config, tiny_models["bert"], "cpu").dtype == torch.float32


def test_unknown_family_is_a_clear_error(tiny_models: dict[str, Path]) -> None:
    config = model_config("bert", adapter="colbert-magic")
    with pytest.raises(ValueError, match=r"unknown adapter family 'colbert-magic' \(known: .*colbert.*dense"):
        load_adapter(config, tiny_models["bert"], "cpu")


def test_missing_weights_never_reach_the_hub(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_adapter(model_config("bert"), tmp_path / "nowhere", "cpu")
