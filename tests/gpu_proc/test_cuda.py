"""The CUDA path: half precision on the device agrees with float32 on CPU (skipped without CUDA)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.runner import Runner

from .tiny import ARCHS, as_batch, model_config, random_items

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("precision", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_cuda_matches_cpu(tiny_models: dict[str, Path], arch: str, precision: str) -> None:
    items = random_items(64, seed=7)
    config = model_config(arch, compute_precision=precision)
    cpu = Runner(torch.device("cpu")).run_dense(
        load_adapter(config, tiny_models[arch], "cpu"), as_batch(items)
    )
    adapter = load_adapter(config, tiny_models[arch], "cuda")
    assert adapter.dtype == getattr(torch, precision) and adapter.device.type == "cuda"
    gpu = Runner(torch.device("cuda")).run_dense(adapter, as_batch(items))
    assert gpu.dtype == np.float32
    cosine = (gpu * cpu).sum(1) / (np.linalg.norm(gpu, axis=1) * np.linalg.norm(cpu, axis=1))
    assert cosine.min() > (0.995 if precision == "bfloat16" else 0.999)  # bf16 keeps 8 mantissa bits
    adapter.close()


def test_cuda_defaults_to_float16(tiny_models: dict[str, Path]) -> None:
    adapter = load_adapter(model_config("bert"), tiny_models["bert"], "cuda")
    assert adapter.dtype == torch.float16


def test_packed_forwards_attend_through_pytorchs_varlen_kernel(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sie.gpu_proc.adapters import varlen

    real = varlen.Kernel.installed()
    if real is None:
        pytest.skip("this PyTorch has no torch.nn.attention.varlen")
    calls: list[int] = []

    @functools.wraps(real)  # the adapter reads the kernel's signature
    def counted(*args: object, **kwargs: object) -> torch.Tensor:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(varlen.Kernel, "attend", counted)
    items = random_items(64, seed=9)  # mixed lengths: the packed stream, not the uniform path
    config = model_config("bert", compute_precision="float16")
    cpu = Runner(torch.device("cpu")).run_dense(
        load_adapter(config, tiny_models["bert"], "cpu"), as_batch(items)
    )
    adapter = load_adapter(config, tiny_models["bert"], "cuda")
    gpu = Runner(torch.device("cuda")).run_dense(adapter, as_batch(items))
    assert calls and not varlen.Kernel.failed
    cosine = (gpu * cpu).sum(1) / (np.linalg.norm(gpu, axis=1) * np.linalg.norm(cpu, axis=1))
    assert cosine.min() > 0.999
    adapter.close()


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_a_grouped_query_decoder_attends_through_the_real_kernel(precision: str) -> None:
    import transformers

    from sie.gpu_proc.adapters import varlen
    from sie.gpu_proc.adapters.packed_decoder import PackedDecoder

    from .test_varlen import DECODER, LENGTHS, batch

    if varlen.Kernel.installed() is None:
        pytest.skip("this PyTorch has no torch.nn.attention.varlen")
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(transformers.Qwen3Config(**DECODER)).eval()
    batches = [batch(lengths, 100, seed=3)[0] for lengths in (LENGTHS, LENGTHS[:3], LENGTHS[:1])]
    with torch.inference_mode():
        wants = [
            [model(input_ids=ids[row : row + 1, :n]).last_hidden_state[0] for row, n in enumerate(lengths)]
            for ids, lengths in zip(batches, (LENGTHS, LENGTHS[:3], LENGTHS[:1]), strict=True)
        ]
        packed = PackedDecoder.wrap(model.to("cuda", getattr(torch, precision)))
        assert packed is not None
        # 89 tokens, then 29 and 9: the second is recorded, the third replays it (checked as it does)
        gots = [
            packed.hidden_states(ids.cuda(), lengths).float().cpu()
            for ids, lengths in zip(batches, (LENGTHS, LENGTHS[:3], LENGTHS[:1]), strict=True)
        ]
    assert not varlen.Kernel.failed  # 4 query heads over 2 key heads went through the kernel
    graphs = packed._replays.graphs
    assert graphs is not None and not graphs.failed and len(graphs) == 2
    for got, want in zip(gots, wants, strict=True):
        for row, expected in enumerate(want):
            cosine = torch.nn.functional.cosine_similarity(got[row, : len(expected)], expected, dim=-1)
            assert cosine.min() > (0.995 if precision == "bfloat16" else 0.999)


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_the_packed_encoder_replays_cuda_graphs_as_transformers_answers(precision: str) -> None:
    from sie.gpu_proc.adapters import cuda_graphs, varlen
    from sie.gpu_proc.adapters.packed import PackedEncoder

    from .test_varlen import batch, bert

    if varlen.Kernel.installed() is None:
        pytest.skip("this PyTorch has no torch.nn.attention.varlen")
    assert cuda_graphs.Graphs.enabled
    model = bert()
    packed = PackedEncoder.wrap(model.to("cuda", getattr(torch, precision)))
    reference = bert()  # the same seed: the same weights, float32 on the CPU
    assert packed is not None
    # four batches in one bucket (the later ones smaller, the fourth one item), then one in another
    batches = ([9, 3, 17, 1, 12, 12, 6], 1), ([20, 19], 2), ([4, 3], 3), ([12], 4), ([40, 50, 7], 5)
    for lengths, seed in batches:
        ids, mask = batch(lengths, 300, seed=seed)
        with torch.inference_mode():
            want = reference(input_ids=ids, attention_mask=mask).last_hidden_state
            got = packed.hidden_states(ids.cuda(), lengths).float().cpu()
        real = mask.bool()
        cosine = torch.nn.functional.cosine_similarity(got[real], want[real], dim=-1)
        assert cosine.min() > (0.995 if precision == "bfloat16" else 0.999), lengths
        assert not got[~real].any()
    graphs = packed._replays.graphs
    assert graphs is not None and not graphs.failed and len(graphs) == 2


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_clip_image_batches_replay_cuda_graphs_as_transformers_answers(precision: str) -> None:
    from sie.gpu_proc.adapters.clip import ClipAdapter
    from sie.shm.layout import ResultKind

    from .test_clip_vision import SPEC, pixels, reference, tiny_clip
    from .test_item_graphs import image_inputs

    adapter = ClipAdapter(tiny_clip().to("cuda", getattr(torch, precision)), SPEC, name="tiny")
    model = tiny_clip()  # the same seed: the same weights, float32 on the CPU
    # three batches in the bucket of 8 (the later ones smaller), then buckets of 1 and 4
    for n in (7, 5, 6, 1, 3):
        received = pixels(n)
        with torch.inference_mode():
            want = reference(model, received)
        output = adapter.forward(image_inputs(received.cuda()), frozenset({ResultKind.DENSE}))
        got = torch.as_tensor(output[ResultKind.DENSE].values).float().cpu()
        cosine = torch.nn.functional.cosine_similarity(got, want, dim=-1)
        assert cosine.min() > (0.995 if precision == "bfloat16" else 0.999), n
    graphs = adapter._image_replays.graphs
    assert graphs is not None and not graphs.failed and len(graphs) == 3
    adapter.close()


def test_the_staging_ring_never_overwrites_a_copy_still_queued() -> None:
    from sie.gpu_proc.transfer import StagingRing

    def allocate(nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    staging = StagingRing(allocate, torch.cuda.synchronize, first_bytes=4096)
    torch.cuda._sleep(50_000_000)  # the stream is busy: every copy below queues behind this
    moved = [staging.stage([np.full(100, i, np.int64)]).to("cuda", non_blocking=True) for i in range(40)]
    assert staging.wraps >= 3
    for i, tensor in enumerate(moved):
        assert tensor.tolist() == [i] * 100


def test_index_arrays_reach_the_device_in_one_copy_unchanged() -> None:
    from sie.gpu_proc.transfer import to_device

    arrays = [np.arange(7, dtype=np.int64), np.arange(12, dtype=np.int64).reshape(3, 4) * 5, np.array([9])]
    moved = to_device(arrays, torch.device("cuda"))
    assert all(t.device.type == "cuda" for t in moved)
    for tensor, array in zip(moved, arrays, strict=True):
        np.testing.assert_array_equal(tensor.cpu().numpy(), array)
