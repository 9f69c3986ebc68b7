"""Decoder embedders (Qwen3-Embedding, e5-mistral, SFR, Linq: causal decoders, last-token pooling)
through DenseAdapter + Runner against plain transformers, on tiny random Qwen3 and Mistral models.

The runner pads on the right; a causal decoder's real tokens never attend to the padding after
them and their positions start at 0 either way, so each item's last real token must equal a
forward of the item alone, and equal the left-padded batch the Qwen3-Embedding model card runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.dense import DenseAdapter
from sie.gpu_proc.adapters.packed_decoder import PackedDecoder
from sie.gpu_proc.runner import Runner

from .tiny import as_batch, model_config, random_items

CPU = torch.device("cpu")
ATOL = 1e-4
ARCHS = ["qwen3", "mistral", "qwen2", "llama"]
COMMON: dict[str, Any] = {
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,  # grouped-query attention, as the real models have
    "head_dim": 16,
    "max_position_embeddings": 128,
}

pytestmark = pytest.mark.usefixtures("deterministic_torch")


def decoder_config(arch: str) -> transformers.PretrainedConfig:
    if arch == "qwen3":
        return transformers.Qwen3Config(**COMMON)
    if arch == "qwen2":  # biases on the q/k/v projections
        return transformers.Qwen2Config(**COMMON)
    if arch == "llama":
        return transformers.LlamaConfig(**COMMON)
    # A window shorter than the longest items, so padding meets Mistral's sliding-window mask.
    return transformers.MistralConfig(**COMMON, sliding_window=16)


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folders: dict[str, Path] = {}
    for arch in ARCHS:
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(decoder_config(arch))
        folder = tmp_path_factory.mktemp(arch)
        model.save_pretrained(folder)
        folders[arch] = folder
    return folders


def load(folder: Path) -> DenseAdapter:
    adapter = load_adapter(model_config("decoder", "last"), folder, "cpu")
    assert isinstance(adapter, DenseAdapter)
    return adapter


def plain(folder: Path) -> torch.nn.Module:
    model: torch.nn.Module = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager")
    return model.eval()


def each_alone(folder: Path, items: list[np.ndarray]) -> np.ndarray:
    """The last token's hidden state of each item run alone, without padding."""
    model, rows = plain(folder), []
    with torch.no_grad():
        for ids in items:
            hidden = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).last_hidden_state
            rows.append(hidden[0, -1])
    result: np.ndarray = torch.stack(rows).numpy()
    return result


def left_padded(folder: Path, items: list[np.ndarray], pad: int = 0) -> np.ndarray:
    """The model card's way: the whole batch padded on the left, hidden[:, -1]."""
    width = max(len(ids) for ids in items)
    input_ids = torch.full((len(items), width), pad, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for i, ids in enumerate(items):
        input_ids[i, width - len(ids) :] = torch.from_numpy(ids.astype(np.int64))
        mask[i, width - len(ids) :] = 1
    with torch.no_grad():
        hidden = plain(folder)(input_ids=input_ids, attention_mask=mask).last_hidden_state
    result: np.ndarray = hidden[:, -1].numpy()
    return result


def mixed_items(seed: int) -> list[np.ndarray]:
    items = random_items(14, seed=seed)
    items.insert(3, np.array([7], np.int32))  # one item of a single token
    return items


@pytest.mark.parametrize("arch", ARCHS)
def test_right_padded_batch_equals_each_item_alone(decoders: dict[str, Path], arch: str) -> None:
    items = mixed_items(seed=1)
    got = Runner(CPU).run_dense(load(decoders[arch]), as_batch(items))
    want = each_alone(decoders[arch], items)
    assert got.dtype == np.float32 and got.shape == want.shape == (len(items), 64)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_left_padded_batch_of_the_model_card_agrees(decoders: dict[str, Path], arch: str) -> None:
    items = mixed_items(seed=2)
    got = Runner(CPU).run_dense(load(decoders[arch]), as_batch(items))
    card = left_padded(decoders[arch], items)
    np.testing.assert_allclose(card, each_alone(decoders[arch], items), rtol=0, atol=ATOL)
    np.testing.assert_allclose(got, card, rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_single_token_items(decoders: dict[str, Path], arch: str) -> None:
    items = [np.array([5], np.int32), np.array([9], np.int32)]
    runner, adapter = Runner(CPU), load(decoders[arch])
    want = each_alone(decoders[arch], items)
    np.testing.assert_allclose(runner.run_dense(adapter, as_batch(items)), want, rtol=0, atol=ATOL)
    np.testing.assert_allclose(runner.run_dense(adapter, as_batch(items[:1])), want[:1], rtol=0, atol=ATOL)
    # A one-token item beside a long one: almost all of its row is padding.
    long = np.arange(4, 44, dtype=np.int32)
    got = runner.run_dense(adapter, as_batch([items[0], long]))
    np.testing.assert_allclose(got, each_alone(decoders[arch], [items[0], long]), rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_equals_single_in_any_order(decoders: dict[str, Path], arch: str) -> None:
    runner, adapter = Runner(CPU), load(decoders[arch])
    items = random_items(40, seed=3)  # lengths 1..40: the runner splits this batch into length runs
    singles = np.concatenate([runner.run_dense(adapter, as_batch([ids])) for ids in items])
    order = np.random.default_rng(4).permutation(len(items))
    shuffled = runner.run_dense(adapter, as_batch([items[i] for i in order]))
    np.testing.assert_allclose(shuffled, singles[order], rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_decoder_facts(decoders: dict[str, Path], arch: str) -> None:
    adapter = load(decoders[arch])
    model = adapter._model
    assert model is not None and type(model).__name__.lower().startswith(arch)
    # The padding-free decoder path; no KV cache filled by forwards that never generate.
    assert adapter.is_padding_free and adapter._head is None
    assert model.config.use_cache is False
    assert (adapter.dim, adapter.pad_token_id, adapter.pooling) == (64, 0, "last")


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_free_stream_equals_each_item_alone_at_every_token(
    decoders: dict[str, Path], arch: str
) -> None:
    # Every position, not only the last: mean-pooled decoders read them all. 30 items make several
    # attention groups; lengths up to 40 cross Mistral's 16-token window.
    model = plain(decoders[arch])
    packed = PackedDecoder.wrap(model)
    assert packed is not None
    items = random_items(30, seed=11)
    width = max(len(ids) for ids in items)
    padded = torch.zeros((len(items), width), dtype=torch.long)
    for i, ids in enumerate(items):
        padded[i, : len(ids)] = torch.from_numpy(ids.astype(np.int64))
    with torch.no_grad():
        got = packed.hidden_states(padded, [len(ids) for ids in items])
        for i, ids in enumerate(items):
            alone = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).last_hidden_state[0]
            torch.testing.assert_close(got[i, : len(ids)], alone, rtol=0, atol=ATOL)
            assert not got[i, len(ids) :].any()
        same = padded[:4, :12].clone()  # equal lengths: the uniform path
        uniform = packed.hidden_states(same, [12] * 4)
        torch.testing.assert_close(uniform, model(input_ids=same).last_hidden_state, rtol=0, atol=ATOL)
