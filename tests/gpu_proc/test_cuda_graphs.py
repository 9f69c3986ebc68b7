"""CUDA graphs over the packed encoder's stream (sie.gpu_proc.adapters.cuda_graphs), on the CPU as
far as the CPU can take them: the varlen kernel's stand-in (tests/gpu_proc/varlen_reference.py)
attends, and a recorder that runs the graph's body at each replay stands in for CUDA's capture, so
the bucketing, the static inputs, the spare rows and sequences and the graph cache run for real
against transformers' own forward. The real capture is checked in tests/gpu_proc/test_cuda.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import transformers

from sie.gpu_proc.adapters import cuda_graphs, varlen
from sie.gpu_proc.adapters.cuda_graphs import Bucket, GraphCache, StreamGraphs, bucket_for
from sie.gpu_proc.adapters.packed import PackedEncoder
from sie.gpu_proc.adapters.packed_decoder import PackedDecoder
from tests.gpu_proc.test_varlen import DECODER, batch, bert
from tests.gpu_proc.varlen_reference import reference_kernel


class Recorded:
    """A "graph" whose replay runs the body again over the same static inputs into the same output."""

    def __init__(self, body: Any, args: tuple[Any, ...], output: torch.Tensor) -> None:
        self.body, self.args, self.output, self.replays = body, args, output, 0

    def replay(self) -> None:
        self.replays += 1
        self.output.copy_(self.body(*self.args))


def recording_capture(self: GraphCache, *args: Any) -> tuple[Recorded, torch.Tensor]:
    output = self._body(*args)  # a capture allocates its output once
    output.fill_(float("nan"))  # and nothing runs until the first replay
    return Recorded(self._body, args, output), output


@pytest.fixture
def on_cpu(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(varlen.Kernel, "attend", reference_kernel)
    monkeypatch.setattr(varlen.Kernel, "anywhere", True)
    monkeypatch.setattr(varlen.Kernel, "failed", False)
    monkeypatch.setattr(cuda_graphs.Graphs, "anywhere", True)
    monkeypatch.setattr(cuda_graphs.Graphs, "enabled", True)
    yield


@pytest.fixture
def recorder(on_cpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StreamGraphs, "_record", recording_capture)


def assert_matches_transformers(model: Any, packed: PackedEncoder, lengths: list[int], seed: int) -> None:
    ids, mask = batch(lengths, 300, seed=seed)
    with torch.inference_mode():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
        got = packed.hidden_states(ids, lengths)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5)
    assert not got[~real].any()


class Frozen(Recorded):
    """A graph that kept its recorded batch's answer: what a host-side value frozen in a capture does."""

    def replay(self) -> None:
        if not self.replays:
            super().replay()
        self.replays += 1


def frozen_capture(self: GraphCache, *args: Any) -> tuple[Frozen, torch.Tensor]:
    recorded, output = recording_capture(self, *args)
    return Frozen(recorded.body, recorded.args, output), output


def test_a_replay_that_disagrees_with_the_eager_forward_turns_graphs_off(
    on_cpu: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(StreamGraphs, "_record", frozen_capture)
    model = bert()
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    with caplog.at_level(logging.WARNING):
        for lengths, seed in (([9, 3, 17], 1), ([20, 19], 2), ([4, 3], 3)):  # one bucket
            assert_matches_transformers(model, packed, lengths, seed)
    graphs = packed._replays.graphs
    assert graphs is not None and graphs.failed and len(graphs) == 0
    assert "disagrees with the eager forward" in caplog.text


def test_buckets_round_each_dimension_up() -> None:
    assert bucket_for(1, 1, 1) == Bucket(64, 16, 128)
    assert bucket_for(64, 16, 128) == Bucket(64, 16, 128)
    assert bucket_for(65, 17, 129) == Bucket(128, 32, 256)
    assert bucket_for(1000, 64, 300) == Bucket(1024, 64, 512)
    assert bucket_for(1025, 65, 512) == Bucket(1536, 128, 512)
    assert bucket_for(4096, 200, 40) == Bucket(4096, 256, 128)
    assert bucket_for(4097, 200, 40) is None  # long enough to run eagerly
    assert bucket_for(1000, 64, 300, most_tokens=768) is None  # over a large model's last bucket


def test_larger_models_replay_fewer_tokens() -> None:
    sizes = [22_000_000, 110_000_000, 335_000_000, 596_000_000, 1_500_000_000, 8_000_000_000]
    assert [cuda_graphs.most_tokens_for(n) for n in sizes] == [4096, 4096, 2048, 1536, 512, 128]


def test_a_large_models_long_batch_runs_eagerly(recorder: None, monkeypatch: pytest.MonkeyPatch) -> None:
    model = bert()
    parameters = sum(p.numel() for p in model.parameters())
    monkeypatch.setattr(cuda_graphs, "PARAMETER_TOKENS", 128 * parameters)  # as if it were 8B
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    assert_matches_transformers(model, packed, [90, 80], seed=4)  # 170 tokens: eager
    assert packed._replays.graphs is not None and len(packed._replays.graphs) == 0
    assert_matches_transformers(model, packed, [60, 40], seed=5)  # 100 tokens: a graph
    assert len(packed._replays.graphs) == 1


def test_replays_answer_as_transformers_in_one_bucket(recorder: None) -> None:
    model = bert()
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    # 60 tokens, then 39 and 7 in the same 64-token bucket: rows and sequences left over from the
    # larger batch must not reach the smaller ones
    for lengths, seed in (([9, 3, 17, 1, 12, 12, 6], 1), ([20, 19], 2), ([4, 3], 3)):
        assert_matches_transformers(model, packed, lengths, seed)
    graphs = packed._replays.graphs
    assert graphs is not None and len(graphs) == 1 and not graphs.failed
    (entry,) = graphs._graphs.values()
    assert entry.graph.replays == 3 and entry.checked


def test_one_item_and_equal_lengths_replay_as_a_stream_too(recorder: None) -> None:
    model = bert()
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    for lengths, seed in (([12], 1), ([7, 7, 7], 2)):  # uniform batches: no packing of their own
        assert_matches_transformers(model, packed, lengths, seed)
    assert packed._replays.graphs is not None and len(packed._replays.graphs) == 1


def test_each_bucket_has_its_graph_and_the_oldest_goes(
    recorder: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda_graphs, "MAX_GRAPHS", 2)
    model = bert()
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    for lengths in ([5, 9], [40, 50], [5, 70, 30], [100, 100, 50], [6, 8]):  # 64, 128, 128, 256, 64 tokens
        assert_matches_transformers(model, packed, lengths, seed=len(lengths))
    graphs = packed._replays.graphs
    assert graphs is not None
    assert list(graphs._graphs) == [
        Bucket(256, 16, 128),
        Bucket(64, 16, 128),
    ]  # least recently used went first


def test_a_batch_past_the_largest_bucket_runs_eagerly(
    recorder: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cuda_graphs, "TOKEN_BUCKETS", (64, 128))
    model = bert()
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    assert_matches_transformers(model, packed, [90, 80], seed=5)
    assert packed._replays.graphs is not None and len(packed._replays.graphs) == 0


def test_a_failed_capture_turns_graphs_off_and_the_batch_runs_eagerly(
    on_cpu: None, caplog: pytest.LogCaptureFixture
) -> None:
    model = bert()  # the real capture: on a CPU-only torch it fails at its first CUDA call
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    with caplog.at_level(logging.WARNING):
        assert_matches_transformers(model, packed, [9, 3, 17], seed=6)
        assert_matches_transformers(model, packed, [9, 3, 17], seed=7)
    assert packed._replays.graphs is not None and packed._replays.graphs.failed
    assert caplog.text.count("CUDA graph capture failed") == 1


def test_switched_off_no_graph_is_made(recorder: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_graphs.Graphs, "enabled", False)
    model = bert()
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    assert_matches_transformers(model, packed, [9, 3, 17], seed=8)
    assert packed._replays.graphs is None


def test_a_model_served_with_lora_adapters_never_replays_graphs(recorder: None) -> None:
    from sie.gpu_proc.lora import LoraSet

    model = bert()
    LoraSet(model, {"a": "/adapters/a"}, capacity=1)  # as the registry makes it at load, none loaded yet
    packed = PackedEncoder.wrap(model)
    assert packed is not None
    assert_matches_transformers(model, packed, [9, 3, 17], seed=9)
    assert packed._replays.graphs is None


@pytest.mark.parametrize(
    "config",
    [transformers.Qwen3Config(**DECODER), transformers.MistralConfig(**DECODER, sliding_window=8)],
    ids=["qwen3", "mistral-window"],
)
def test_decoders_replay_as_transformers_answers(recorder: None, config: Any) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(config).eval()
    packed = PackedDecoder.wrap(model)
    assert packed is not None
    # one bucket, the later batches smaller, the last one item
    for lengths, seed in (([9, 3, 17, 1, 12, 12, 6], 1), ([20, 19], 2), ([11], 3)):
        ids, _ = batch(lengths, 100, seed=seed)
        with torch.inference_mode():
            got = packed.hidden_states(ids, lengths)
            for row, n in enumerate(lengths):  # each item alone: causal, so padding never matters
                alone = model(input_ids=ids[row : row + 1, :n]).last_hidden_state[0]
                torch.testing.assert_close(got[row, :n], alone, rtol=0, atol=1e-4)
    graphs = packed._replays.graphs
    assert graphs is not None and len(graphs) == 1 and not graphs.failed
