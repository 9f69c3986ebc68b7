"""Decoders run with bidirectional attention (GritLM: Mistral, `is_causal: false`, mean pooling)
through DenseAdapter + Runner, padding-free and padded, against plain transformers on tiny random
weights given an explicit 4D mask that lets every real token see every other (and, with Mistral's
sliding window, only keys within the window on either side, transformers' bidirectional rule).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import load_adapter, varlen
from sie.gpu_proc.adapters.dense import DenseAdapter
from sie.gpu_proc.adapters.packed_decoder import PackedDecoder
from sie.gpu_proc.runner import Runner
from sie.model_config import ModelConfig, parse_model_config

from .test_decoder_embedders import COMMON
from .tiny import as_batch, random_items
from .varlen_reference import reference_kernel

CPU = torch.device("cpu")
ATOL = 1e-4  # float32
WINDOW = 16  # shorter than the longest items (40), so the window binds
ARCHS = ["mistral", "qwen3"]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


def decoder_config(arch: str) -> transformers.PretrainedConfig:
    if arch == "qwen3":
        return transformers.Qwen3Config(**COMMON)
    return transformers.MistralConfig(**COMMON, sliding_window=WINDOW)


@pytest.fixture(scope="module")
def decoders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folders: dict[str, Path] = {}
    for arch in ARCHS:
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(f"bidirectional-{arch}")
        transformers.AutoModel.from_config(decoder_config(arch)).save_pretrained(folder)
        folders[arch] = folder
    return folders


def gritlm_like(arch: str) -> ModelConfig:
    profile = {
        "adapter": "dense",
        "adapter_options": {"loadtime": {"bidirectional": True}, "runtime": {"pooling": "mean"}},
    }
    return parse_model_config({"sie_id": f"tiny/bidirectional-{arch}", "profiles": {"default": profile}})


def load(folder: Path, arch: str) -> DenseAdapter:
    adapter = load_adapter(gritlm_like(arch), folder, "cpu")
    assert isinstance(adapter, DenseAdapter)
    return adapter


def reference_hidden(folder: Path, items: list[np.ndarray]) -> list[torch.Tensor]:
    """Each item's last hidden states from transformers' own (causal) model, eager attention, given
    a 4D additive mask that opens every key of the right-padded batch except padding and, with a
    sliding window, keys farther than the window."""
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    width = max(len(ids) for ids in items)
    input_ids = torch.zeros((len(items), width), dtype=torch.long)
    real = torch.zeros((len(items), width), dtype=torch.bool)
    for i, ids in enumerate(items):
        input_ids[i, : len(ids)] = torch.from_numpy(ids.astype(np.int64))
        real[i, : len(ids)] = True
    allowed = real[:, None, None, :].expand(-1, 1, width, -1)
    window = getattr(model.config, "sliding_window", None)
    if window:
        rows = torch.arange(width)
        allowed = allowed & ((rows[:, None] - rows[None, :]).abs() <= window)
    mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        hidden = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    return [hidden[i, : len(ids)] for i, ids in enumerate(items)]


def mean_pooled(hidden: list[torch.Tensor]) -> np.ndarray:
    pooled: np.ndarray = torch.stack([h.mean(0) for h in hidden]).numpy()
    return pooled


def mixed_items(seed: int) -> list[np.ndarray]:
    items = random_items(14, seed=seed)
    items.insert(3, np.array([7], np.int32))  # one item of a single token
    return items


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_free_batch_equals_bidirectional_transformers(decoders: dict[str, Path], arch: str) -> None:
    items = mixed_items(seed=1)
    adapter = load(decoders[arch], arch)
    assert adapter.is_padding_free
    got = Runner(CPU).run_dense(adapter, as_batch(items))
    want = mean_pooled(reference_hidden(decoders[arch], items))
    assert got.shape == want.shape == (len(items), 64)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    # Each item alone (no padding at all) gives the same rows.
    alone = np.concatenate([mean_pooled(reference_hidden(decoders[arch], [ids])) for ids in items[:4]])
    np.testing.assert_allclose(got[:4], alone, rtol=0, atol=ATOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_padded_forward_equals_bidirectional_transformers(
    decoders: dict[str, Path], arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The padded path: transformers' own decoder with `is_causal` off (and the forward told so).
    monkeypatch.setattr(PackedDecoder, "wrap", staticmethod(lambda base: None))
    adapter = load(decoders[arch], arch)
    assert not adapter.is_padding_free
    items = mixed_items(seed=2)
    got = Runner(CPU).run_dense(adapter, as_batch(items))
    np.testing.assert_allclose(got, mean_pooled(reference_hidden(decoders[arch], items)), rtol=0, atol=ATOL)


@pytest.mark.parametrize("through_varlen", [False, True], ids=["groups", "varlen"])
@pytest.mark.parametrize("arch", ARCHS)
def test_packed_stream_equals_reference_at_every_token(
    decoders: dict[str, Path], arch: str, through_varlen: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 30 items make several attention groups; equal lengths take the uniform path. `varlen`: CUDA's
    # varlen kernel, a CPU stand-in with its contract here, with the window on both sides.
    windows: list[tuple[int, int]] = []
    if through_varlen:

        def kernel(*args: Any, window_size: tuple[int, int], **kwargs: Any) -> torch.Tensor:
            windows.append(window_size)
            return reference_kernel(*args, window_size=window_size, **kwargs)

        monkeypatch.setattr(varlen.Kernel, "attend", kernel)
        monkeypatch.setattr(varlen.Kernel, "anywhere", True)
        monkeypatch.setattr(varlen.Kernel, "failed", False)
    adapter = load(decoders[arch], arch)
    model = adapter._model
    assert model is not None and model.config.is_causal is False
    packed = PackedDecoder.wrap(model)
    assert packed is not None
    items = random_items(30, seed=11)
    width = max(len(ids) for ids in items)
    padded = torch.zeros((len(items), width), dtype=torch.long)
    for i, ids in enumerate(items):
        padded[i, : len(ids)] = torch.from_numpy(ids.astype(np.int64))
    with torch.no_grad():
        got = packed.hidden_states(padded, [len(ids) for ids in items])
        for i, want in enumerate(reference_hidden(decoders[arch], items)):
            torch.testing.assert_close(got[i, : len(want)], want, rtol=0, atol=ATOL)
            assert not got[i, len(want) :].any()
        same = [ids[:12] for ids in items if len(ids) >= 12][:4]
        uniform = packed.hidden_states(torch.from_numpy(np.stack(same).astype(np.int64)), [12] * len(same))
        for i, want in enumerate(reference_hidden(decoders[arch], same)):
            torch.testing.assert_close(uniform[i], want, rtol=0, atol=ATOL)
    if through_varlen:  # the mixed batch's layers only: a uniform batch needs no kernel
        assert windows == [(WINDOW, WINDOW) if arch == "mistral" else varlen.FULL] * len(model.layers)


def test_bidirectional_differs_from_causal(decoders: dict[str, Path]) -> None:
    # The option changes the result: a causal load of the same weights gives other vectors.
    items = mixed_items(seed=3)
    causal_config = parse_model_config(
        {"sie_id": "tiny/causal", "profiles": {"default": {"adapter": "dense"}}}
    )
    causal = load_adapter(causal_config, decoders["mistral"], "cpu")
    assert isinstance(causal, DenseAdapter)
    runner = Runner(CPU)
    both = runner.run_dense(load(decoders["mistral"], "mistral"), as_batch(items))
    one_way = runner.run_dense(causal, as_batch(items))
    assert np.abs(both - one_way).max() > 1e-2
