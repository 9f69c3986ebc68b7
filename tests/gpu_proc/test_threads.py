"""Intra-op threads per CPU batch: one for a light batch, every core for a heavy one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.runner import Runner
from sie.gpu_proc.threads import HEAVY, PARALLEL_MIN_FLOPS, ThreadPolicy, linear_weights

from .tiny import as_batch, model_config, random_items


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def adapter(tiny_models: dict[str, Path]) -> Adapter:
    return load_adapter(model_config("bert"), tiny_models["bert"], "cpu")


def test_counts_the_linear_weights_the_adapter_holds(adapter: Adapter) -> None:
    seen: dict[int, torch.nn.Linear] = {}
    stack = list(vars(adapter).values())
    while stack:  # every object reachable from the adapter, however deep
        value = stack.pop()
        if isinstance(value, torch.nn.Module):
            seen.update({id(m): m for m in value.modules() if isinstance(m, torch.nn.Linear)})
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            stack += list(vars(value).values())
    expected = sum(m.weight.numel() for m in seen.values())
    assert expected > 0 and linear_weights(adapter) == expected
    onnx_like = type("Session", (), {"path": "model.onnx"})()
    assert linear_weights(onnx_like) == HEAVY  # no torch modules: an opaque runtime


def test_a_light_batch_runs_on_one_thread_and_a_heavy_one_on_every_core(
    adapter: Adapter, restore_threads: None
) -> None:
    policy = ThreadPolicy(most=2)
    light = int(PARALLEL_MIN_FLOPS // (2 * linear_weights(adapter))) - 1
    assert policy.choose(adapter, light, is_media=False) == 1 and torch.get_num_threads() == 1
    assert policy.choose(adapter, light + 2, is_media=False) == 2 and torch.get_num_threads() == 2


def test_media_cost_what_the_adapter_says_or_count_as_heavy(adapter: Adapter, restore_threads: None) -> None:
    policy = ThreadPolicy(most=2)
    assert policy.choose(adapter, 1, is_media=True) == 2  # no media_flops_per_item: heavy
    images = type("Images", (), {"media_flops_per_item": PARALLEL_MIN_FLOPS / 4})()
    assert policy.choose(images, 3, is_media=True) == 1  # type: ignore[arg-type]
    assert policy.choose(images, 4, is_media=True) == 2  # type: ignore[arg-type]


def test_an_operators_thread_count_is_never_changed(adapter: Adapter, restore_threads: None) -> None:
    policy = ThreadPolicy(most=2, fixed=2)
    assert torch.get_num_threads() == 2
    assert policy.choose(adapter, 1, is_media=False) == 2 and torch.get_num_threads() == 2


def test_the_runner_applies_the_policy(adapter: Adapter, restore_threads: None) -> None:
    runner = Runner(torch.device("cpu"), ThreadPolicy(most=2))
    torch.set_num_threads(2)
    out = runner.run_dense(adapter, as_batch(random_items(3, seed=1)))
    assert out.shape[0] == 3 and torch.get_num_threads() == 1  # a tiny model: always light
