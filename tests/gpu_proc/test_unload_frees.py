"""An unloaded model's memory is free at once: after `close`, the registry's young-generation
collection (`sie.gpu_proc.adapters.common.release`) is enough. A reference cycle through the
adapter (a bound method held by the adapter's own CUDA-graph replays, say) would keep the whole
model until a full collection, which the device process avoids at each unload because it stalls
every other model's batches, so eviction under memory pressure would free nothing."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.clip import ClipAdapter
from sie.gpu_proc.runner import Runner
from tests.gpu_proc.test_clip_vision import SPEC, pixels, tiny_clip
from tests.gpu_proc.test_item_graphs import embed

from .tiny import ARCHS, as_batch, model_config, random_items


def assert_unload_frees(adapter: Any) -> None:
    """Close `adapter` after a long life (it sits in the oldest generation, out of reach of
    `collect(1)`), and check that its model is gone after a young collection, even while the
    caller still holds the adapter object."""
    model = weakref.ref(adapter.lora_target())
    gc.collect()
    gc.freeze()  # everything alive now counts as old, as a long-served adapter does
    try:
        adapter.close()
        gc.collect(1)  # what release() does after an unload
        assert model() is None, "the unloaded model outlives the young collection"
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("arch", ARCHS)
def test_an_unloaded_encoder_is_freed_at_once(tiny_models: dict[str, Path], arch: str) -> None:
    adapter = load_adapter(model_config(arch), tiny_models[arch], "cpu")
    Runner(torch.device("cpu")).run_dense(adapter, as_batch(random_items(8, seed=1)))
    assert_unload_frees(adapter)


def test_an_unloaded_clip_is_freed_at_once() -> None:
    adapter = ClipAdapter(tiny_clip(), SPEC, name="tiny")
    embed(adapter, pixels(3))
    assert_unload_frees(adapter)
