"""The packed forwards' varlen attention path (sie.gpu_proc.adapters.varlen), on the CPU as far as
the CPU can take it: PyTorch's varlen kernel runs on CUDA only, so a stand-in with the kernel's
documented contract (tests/gpu_proc/varlen_reference.py) takes its place, and the packed encoder
and decoders through it must equal transformers' own forwards of the same weights. The real
kernel is compared with the padded forward in tests/gpu_proc/test_cuda.py, where CUDA is."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import transformers

from sie.gpu_proc.adapters import varlen
from sie.gpu_proc.adapters.packed import PackedEncoder
from sie.gpu_proc.adapters.packed_decoder import PackedDecoder
from sie.gpu_proc.adapters.packed_modernbert import PackedModernBert
from tests.gpu_proc.varlen_reference import reference_kernel

LENGTHS = [9, 3, 17, 1, 12, 12, 30, 5]
DECODER: dict[str, Any] = {
    "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128,
}  # fmt: skip


class Calls:
    def __init__(self, kernel: Any = reference_kernel) -> None:
        self.kernel, self.windows = kernel, []

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.windows.append(kwargs["window_size"])
        return self.kernel(*args, **kwargs)


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    calls = Calls()
    monkeypatch.setattr(varlen.Kernel, "attend", calls)
    monkeypatch.setattr(varlen.Kernel, "anywhere", True)
    monkeypatch.setattr(varlen.Kernel, "failed", False)
    yield calls


def batch(lengths: list[int], vocab: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    ids = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.from_numpy(rng.integers(5, vocab, n))
    return ids, (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()


def bert() -> Any:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96
    )
    return transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()


def test_the_encoder_attends_through_the_kernel_as_transformers_does(kernel: Calls) -> None:
    model = bert()
    ids, mask = batch(LENGTHS, 300)
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = packed.hidden_states(ids, LENGTHS)
    assert kernel.windows == [varlen.FULL] * 3  # one call per layer, every key of the sequence
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5)
    assert not got[~real].any()


@pytest.mark.parametrize(
    ("config", "windows"),
    [
        (transformers.Qwen3Config(**DECODER), [varlen.CAUSAL] * 2),
        (transformers.MistralConfig(**DECODER, sliding_window=8), [(7, 0)] * 2),  # keys 0..7 back
    ],
    ids=["qwen3", "mistral-window"],
)
def test_decoders_attend_through_the_kernel_as_transformers_does(
    kernel: Calls, config: Any, windows: list[tuple[int, int]]
) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    packed = PackedDecoder.wrap(model)
    assert packed is not None
    ids, _ = batch(LENGTHS, 100, seed=3)
    with torch.inference_mode():
        got = packed.hidden_states(ids, LENGTHS)
        for row, n in enumerate(LENGTHS):  # each item alone: causal, so padding never matters
            alone = model(input_ids=ids[row : row + 1, :n]).last_hidden_state[0]
            torch.testing.assert_close(got[row, :n], alone, rtol=0, atol=1e-4)
    assert kernel.windows == windows


def older_kernel(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seq_q: torch.Tensor,
    cu_seq_k: torch.Tensor,
    max_q: int,
    max_k: int,
    *,
    return_aux: Any = None,
    scale: float | None = None,
    window_size: tuple[int, int] = varlen.FULL,
) -> torch.Tensor:
    """PyTorch 2.11's signature: no `enable_gqa`; its flash kernel attends fewer key heads as they are."""
    grouped = q.shape[1] != k.shape[1]
    return reference_kernel(
        q, k, v, cu_seq_q, cu_seq_k, max_q, max_k, window_size=window_size, enable_gqa=grouped
    )  # fmt: skip


def test_a_kernel_without_the_gqa_flag_serves_grouped_key_heads(kernel: Calls) -> None:
    kernel.kernel = older_kernel
    kernel.__signature__ = inspect.signature(older_kernel)  # type: ignore[attr-defined]  # as the real one shows it
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(transformers.Qwen3Config(**DECODER)).eval()
    packed = PackedDecoder.wrap(model)
    assert packed is not None
    ids, _ = batch(LENGTHS, 100, seed=3)
    with torch.inference_mode():
        got = packed.hidden_states(ids, LENGTHS)
        for row, n in enumerate(LENGTHS):
            alone = model(input_ids=ids[row : row + 1, :n]).last_hidden_state[0]
            torch.testing.assert_close(got[row, :n], alone, rtol=0, atol=1e-4)
    assert kernel.windows == [varlen.CAUSAL] * 2 and not varlen.Kernel.failed


def test_a_failing_kernel_is_dropped_for_padded_groups(
    kernel: Calls, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise TypeError("varlen_attn() got an unexpected keyword argument 'window_size'")

    kernel.kernel = broken
    model = bert()
    ids, mask = batch(LENGTHS, 300)
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    with torch.inference_mode(), caplog.at_level(logging.WARNING):
        got = packed.hidden_states(ids, LENGTHS)
        again = packed.hidden_states(ids, LENGTHS)
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert len(kernel.windows) == 1 and varlen.Kernel.failed  # tried once, never again
    assert "varlen attention failed" in caplog.text
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(again, got)


def test_a_kernel_answering_in_another_shape_is_dropped(kernel: Calls) -> None:
    kernel.kernel = lambda q, *args, **kwargs: q[:, :1]  # one head's worth: not the contract
    model = bert()
    ids, mask = batch(LENGTHS, 300)
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    with torch.inference_mode():
        got = packed.hidden_states(ids, LENGTHS)
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert varlen.Kernel.failed
    torch.testing.assert_close(got[mask.bool()], want[mask.bool()], rtol=0, atol=1e-5)


def test_out_of_memory_is_the_batchs_failure_not_the_kernels(kernel: Calls) -> None:
    def exhausted(*args: Any, **kwargs: Any) -> torch.Tensor:
        raise torch.OutOfMemoryError("CUDA out of memory")

    kernel.kernel = exhausted
    packed = PackedEncoder.wrap(bert())
    assert packed is not None
    with pytest.raises(torch.OutOfMemoryError), torch.inference_mode():
        packed.hidden_states(batch(LENGTHS, 300)[0], LENGTHS)
    assert not varlen.Kernel.failed


def test_the_kernel_applies_only_on_cuda_in_half_precision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(varlen.Kernel, "attend", reference_kernel)
    monkeypatch.setattr(varlen.Kernel, "failed", False)
    cpu = torch.device("cpu")
    assert varlen.sequences([3, 5], cpu, torch.float16, 64) is None
    monkeypatch.setattr(varlen.Kernel, "anywhere", True)
    found = varlen.sequences([3, 5, 1], cpu, torch.float16, 64)
    assert found is not None and found.offsets.tolist() == [0, 3, 8, 9] and found.longest == 5
    assert found.offsets.dtype == torch.int32
    assert varlen.sequences([3], cpu, torch.float16, 60) is None  # not a head size flash takes
    monkeypatch.setattr(varlen.Kernel, "anywhere", False)
    assert varlen.sequences([3], torch.device("cuda"), torch.float32, 64) is None


def test_modernbert_attends_through_the_kernel_as_transformers_does(kernel: Calls) -> None:
    # A local window (8 either side) far shorter than the longest item, so the band binds.
    torch.manual_seed(2)
    config = transformers.ModernBertConfig(
        vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, local_attention=16,
        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
    )  # fmt: skip
    model = transformers.AutoModel.from_config(config, attn_implementation="sdpa").eval()
    packed = PackedModernBert.wrap(model)
    assert packed is not None
    ids, mask = batch(LENGTHS, 300, seed=5)
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = packed.hidden_states(ids, LENGTHS)
    assert kernel.windows == [varlen.FULL, (8, 8), (8, 8)]
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5)
