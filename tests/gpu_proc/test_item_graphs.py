"""CUDA graphs over CLIP's image batches (sie.gpu_proc.adapters.item_graphs), on the CPU as far as
the CPU can take them: a recorder that runs the graph's body at each replay stands in for CUDA's
capture (as in test_cuda_graphs.py), so the item buckets, the static batch, its spare items and
the graph cache run for real through the CLIP adapter, against transformers' `get_image_features`
on the same weights. The real capture is checked in tests/gpu_proc/test_cuda.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

from sie.gpu_proc.adapters import cuda_graphs
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import ClipAdapter
from sie.gpu_proc.adapters.cuda_graphs import keep_off_graphs
from sie.gpu_proc.adapters.item_graphs import ItemGraphs, ItemReplays, items_bucket, most_items_for
from sie.shm.layout import ResultKind
from tests.gpu_proc.test_clip_vision import SPEC, pixels, reference, tiny_clip
from tests.gpu_proc.test_cuda_graphs import frozen_capture, recording_capture

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture
def graphs_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_graphs.Graphs, "anywhere", True)
    monkeypatch.setattr(cuda_graphs.Graphs, "enabled", True)


@pytest.fixture
def recorder(graphs_on_cpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ItemGraphs, "_record", recording_capture)


def image_inputs(received: torch.Tensor) -> ForwardInputs:
    empty = torch.zeros((received.shape[0], 0), dtype=torch.long)
    return ForwardInputs(empty, empty, None, None, [0] * received.shape[0], False, pixels=received)


def embed(adapter: ClipAdapter, received: torch.Tensor) -> torch.Tensor:
    output = adapter.forward(image_inputs(received), frozenset({ResultKind.DENSE}))[ResultKind.DENSE]
    return torch.as_tensor(output.values)


def assert_matches_transformers(adapter: ClipAdapter, model: Any, n: int, seed: int) -> None:
    received = pixels(n + 100 * seed)[:n]  # pixels(k) draws k images from seed k
    with torch.inference_mode():
        want = reference(model, received)
    torch.testing.assert_close(embed(adapter, received), want, atol=1e-5, rtol=0)


def test_image_batches_replay_as_transformers_answers(recorder: None) -> None:
    adapter, model = ClipAdapter(tiny_clip(), SPEC, name="tiny"), tiny_clip()
    # 7 images, then 5 and 6 in the same bucket of 8: the images left over from the larger batch
    # must not reach the smaller ones; then buckets of 1 and 4
    for n, seed in ((7, 1), (5, 2), (6, 3), (1, 4), (3, 5)):
        assert_matches_transformers(adapter, model, n, seed)
    graphs = adapter._image_replays.graphs
    assert graphs is not None and len(graphs) == 3 and not graphs.failed
    eight = graphs._graphs[((8, 32, 32, 3), torch.uint8)]
    assert eight.graph.replays == 3 and eight.checked


def test_a_replay_that_disagrees_with_the_eager_forward_turns_item_graphs_off(
    graphs_on_cpu: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(ItemGraphs, "_record", frozen_capture)
    adapter, model = ClipAdapter(tiny_clip(), SPEC, name="tiny"), tiny_clip()
    with caplog.at_level(logging.WARNING):
        for n, seed in ((3, 1), (4, 2), (3, 3)):  # one bucket; the second batch is checked
            assert_matches_transformers(adapter, model, n, seed)
    graphs = adapter._image_replays.graphs
    assert graphs is not None and graphs.failed and len(graphs) == 0
    assert "disagrees with the eager forward" in caplog.text


def test_a_model_kept_off_graphs_runs_its_images_eagerly(recorder: None) -> None:
    adapter, model = ClipAdapter(tiny_clip(), SPEC, name="tiny"), tiny_clip()
    keep_off_graphs(adapter._live())  # what a LoRA set does to the module it wraps
    assert_matches_transformers(adapter, model, 3, seed=1)
    assert adapter._image_replays.graphs is None


def test_batches_past_the_largest_bucket_run_eagerly(recorder: None) -> None:
    model = tiny_clip()
    calls: list[int] = []

    def body(batch: torch.Tensor) -> torch.Tensor:
        calls.append(batch.shape[0])
        return batch.float().mean(dim=(1, 2))

    replays = ItemReplays(model, body, flops_per_item=cuda_graphs.FLOPS_PER_FORWARD / 4)  # 4 at most
    received = pixels(5)
    assert replays.run(received) is None  # 5 images: the caller runs them eagerly
    got = replays.run(received[:3])
    torch.testing.assert_close(got, received[:3].float().mean(dim=(1, 2)))
    assert replays.graphs is not None and len(replays.graphs) == 1 and calls[0] == 4  # recorded at 4


def test_item_buckets_step_by_a_half_or_a_third() -> None:
    assert [items_bucket(n) for n in (1, 2, 3, 5, 9, 17, 25, 33, 49, 65, 97, 128)] == [
        1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 128,
    ]  # fmt: skip
    assert items_bucket(129) is None
    assert items_bucket(5, most_items=4) is None


def test_heavier_towers_replay_fewer_items() -> None:
    # 2 x linear weights x tokens: ViT-B/32 at 224 (50 tokens), ViT-L/14 at 224 (257) and at 336 (577)
    flops = [2 * 86e6 * 50, 2 * 303e6 * 257, 2 * 303e6 * 577, 1e13]
    assert [most_items_for(f) for f in flops] == [128, 8, 4, 1]
