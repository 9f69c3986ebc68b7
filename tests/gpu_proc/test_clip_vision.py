"""The plain-function CLIP image tower against transformers' `get_image_features` on the same
weights and pixels: with and without the folded patch embedding, with a layer wrapped the way
LoRA wraps it, and chosen for CLIP only."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from sie.gpu_proc.adapters import clip_vision
from sie.gpu_proc.adapters.patches import fold_into
from tests.gpu_proc.test_patches import CLIP_SPEC

pytestmark = pytest.mark.usefixtures("deterministic_torch")

SPEC = dataclasses.replace(CLIP_SPEC, height=32, width=32, shortest_edge=32)  # the tiny tower's size


def tower(layers: int) -> dict[str, int]:
    return {"hidden_size": 32, "num_hidden_layers": layers, "num_attention_heads": 4, "intermediate_size": 64}


def tiny_clip(layers: int = 3, act: str = "quick_gelu") -> Any:
    import transformers

    config = transformers.CLIPConfig(
        text_config={**tower(layers), "vocab_size": 100},
        vision_config={**tower(layers), "image_size": 32, "patch_size": 8, "hidden_act": act},
        projection_dim=24,
    )
    torch.manual_seed(0)
    return transformers.CLIPModel(config).eval()


def pixels(n: int) -> torch.Tensor:
    rng = np.random.default_rng(n)
    return torch.from_numpy(rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8))


def normalized(received: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(SPEC.mean).view(1, 3, 1, 1)
    std = torch.tensor(SPEC.std).view(1, 3, 1, 1)
    return (received.permute(0, 3, 1, 2).float() / 255 - mean) / std


def reference(model: Any, received: torch.Tensor) -> torch.Tensor:
    features = model.get_image_features(pixel_values=normalized(received))
    return features if isinstance(features, torch.Tensor) else features.pooler_output


@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("act", ["quick_gelu", "gelu"])
def test_equals_get_image_features(n: int, layers: int, act: str) -> None:
    model = tiny_clip(layers, act)
    received = pixels(n)
    with torch.inference_mode():
        want = reference(model, received)
        got = clip_vision.image_features(model, normalized(received))
    assert got.shape == want.shape == (n, 24)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_equals_it_through_the_folded_patch_embedding() -> None:
    model = tiny_clip()
    received = pixels(4)
    with torch.inference_mode():
        want = reference(model, received)
        assert fold_into(model.vision_model.embeddings, SPEC)
        got = clip_vision.image_features(model, received.float().permute(0, 3, 1, 2))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


class Shifted(nn.Module):
    """A layer wrapped as LoRA wraps one: the base output plus something of its own."""

    def __init__(self, base: nn.Linear) -> None:
        super().__init__()
        self.base = base

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) * 1.5 + 0.25


@pytest.mark.parametrize("name", ["q_proj", "k_proj", "v_proj", "out_proj"])
def test_wrapped_layers_still_apply(name: str) -> None:
    model = tiny_clip(layers=2)
    received = pixels(2)
    with torch.inference_mode():
        before = clip_vision.image_features(model, normalized(received))
        for layer in model.vision_model.encoder.layers:
            setattr(layer.self_attn, name, Shifted(getattr(layer.self_attn, name)))
        want = reference(model, received)
        got = clip_vision.image_features(model, normalized(received))
    assert not torch.allclose(got, before, atol=1e-3)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_fits_clip_but_not_siglip() -> None:
    import transformers

    config = transformers.SiglipConfig(
        text_config={**tower(1), "vocab_size": 100},
        vision_config={**tower(1), "image_size": 32, "patch_size": 8},
    )
    siglip = transformers.SiglipModel(config)
    assert clip_vision.fits(tiny_clip())
    assert not clip_vision.fits(siglip)
