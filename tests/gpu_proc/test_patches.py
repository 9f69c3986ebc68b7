"""The folded patch embedding equals normalizing the pixels and running the patch convolution."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.patches import FoldedPatchEmbedding, fold_into
from sie.media_config import CLIP_MEAN, CLIP_STD, ImageSpec

CLIP_SPEC = ImageSpec(
    kind="crop",
    height=64,
    width=96,
    shortest_edge=64,
    resample=3,
    do_resize=True,
    do_center_crop=True,
    rescale_factor=1 / 255,
    do_normalize=True,
    mean=CLIP_MEAN,
    std=CLIP_STD,
)
SPECS = {
    "clip": CLIP_SPEC,
    "siglip": dataclasses.replace(CLIP_SPEC, kind="square", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    "unnormalized": dataclasses.replace(CLIP_SPEC, do_normalize=False),
    "float-pixels": dataclasses.replace(CLIP_SPEC, kind="owlv2"),  # received already rescaled
}


def received(spec: ImageSpec, n: int = 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    levels = torch.randint(0, 256, (n, spec.height, spec.width, 3), dtype=torch.uint8, generator=generator)
    return levels.float() / 255 if spec.float_pixels else levels


def patch_conv(bias: bool, patch: int = 16, out: int = 24) -> nn.Conv2d:
    torch.manual_seed(1)
    return nn.Conv2d(3, out, kernel_size=patch, stride=patch, bias=bias)


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_equals_normalize_then_convolve(name: str, bias: bool) -> None:
    spec = SPECS[name]
    conv = patch_conv(bias)
    pixels = received(spec)
    with torch.inference_mode():
        want = conv(PixelNormalizer(spec, torch.device("cpu"))(pixels, torch.float32))
        # As the model's embeddings call it: the [n, 3, H, W] view, converted to the weights' dtype.
        got = FoldedPatchEmbedding(conv, spec)(pixels.permute(0, 3, 1, 2).to(torch.float32))
    assert got.shape == want.shape == (3, 24, spec.height // 16, spec.width // 16)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)


def test_contiguous_input_gives_the_same() -> None:
    conv = patch_conv(bias=True)
    pixels = received(CLIP_SPEC).permute(0, 3, 1, 2).float()
    folded = FoldedPatchEmbedding(conv, CLIP_SPEC)
    with torch.inference_mode():
        torch.testing.assert_close(folded(pixels.contiguous()), folded(pixels), atol=0, rtol=0)


@pytest.mark.parametrize(
    "conv",
    [
        nn.Conv2d(3, 8, kernel_size=16, stride=8),  # overlapping patches
        nn.Conv2d(3, 8, kernel_size=16, stride=16, padding=1),
        nn.Conv2d(3, 8, kernel_size=16, stride=16).half(),  # float16 weights keep the convolution
        nn.Linear(3, 8),
    ],
    ids=["overlapping", "padded", "float16", "not-a-conv"],
)
def test_only_plain_float32_patch_convolutions_are_folded(conv: nn.Module) -> None:
    embeddings = nn.Module()
    embeddings.patch_embedding = conv
    assert not fold_into(embeddings, CLIP_SPEC)
    assert embeddings.patch_embedding is conv


def test_fold_into_replaces_the_convolution() -> None:
    embeddings = nn.Module()
    embeddings.patch_embedding = patch_conv(bias=False)
    assert fold_into(embeddings, CLIP_SPEC)
    assert isinstance(embeddings.patch_embedding, FoldedPatchEmbedding)
    assert embeddings.patch_embedding.weight.dtype == torch.float32  # what the embeddings cast pixels to
