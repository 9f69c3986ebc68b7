"""A vision transformer's patch embedding with the pixel normalization folded into its weights.

A ViT's first layer is a convolution whose kernel equals its stride: each patch's pixels times one
weight matrix. Normalizing the pixels before it, `(x * scale - mean) / std` per channel, is affine,
so it folds into that matrix and a bias, and the received pixels go in as they are: no passes over
the batch to normalize it, and one matrix product over the patches instead of the convolution
(16 images at 224 px on this CPU, one thread: 15.3 -> 9.1 ms for a small CLIP, 86 -> 60 ms for
ViT-B/32's patch embedding).

The two copies left (received pixels to float, patches gathered into rows) write into buffers
kept from batch to batch on the CPU: a new 10 MB tensor per batch is new pages from the kernel,
and faulting them in cost more than the folding saved.

Only for float32 weights: folded into float16 weights, `std`'s division shrinks small weights into
subnormals, so reduced-precision models keep the normalizer and their convolution.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sie.media_config import ImageSpec


class FoldedPatchEmbedding(nn.Module):
    """Drop-in for the patch convolution, taking pixels as received (before normalization).

    Input [n, C, H, W] in the received scale (uint8 levels or the processor's floats), any memory
    layout; output [n, out, H / p, W / p], as the convolution's on normalized pixels.
    """

    def __init__(self, conv: nn.Conv2d, spec: ImageSpec) -> None:
        super().__init__()
        channels = conv.in_channels
        self.patch = int(conv.kernel_size[0])
        scale, shift = _affine(spec, channels, conv.weight.device)
        weight = conv.weight.detach().double()  # [out, C, p, p]; folded in float64, then rounded once
        bias = (weight * shift.view(1, -1, 1, 1)).sum(dim=(1, 2, 3))
        if conv.bias is not None:
            bias = bias + conv.bias.detach().double()
        # Channels last within a patch, as received pixels lie in memory: [out, p * p * C].
        folded = (weight * scale.view(1, -1, 1, 1)).permute(0, 2, 3, 1).reshape(len(weight), -1)
        self.register_buffer("weight", folded.float().contiguous())
        self.register_buffer("bias", bias.float())
        self._patches = Scratch()

    @staticmethod
    def fits(conv: object) -> bool:
        """Whether `conv` is a plain non-overlapping patch convolution on float32 weights."""
        return (
            isinstance(conv, nn.Conv2d)
            and conv.kernel_size[0] == conv.kernel_size[1]
            and tuple(conv.stride) == tuple(conv.kernel_size)
            and conv.padding in ((0, 0), "valid")
            and tuple(conv.dilation) == (1, 1)
            and conv.groups == 1
            and conv.padding_mode == "zeros"
            and conv.weight.dtype == torch.float32
        )

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        n, channels, height, width = pixels.shape
        p = self.patch
        rows, cols = height // p, width // p
        # [n, rows, p, cols, p * C] -> [n, rows, cols, p, p * C]: each patch's pixels in a row.
        lines = pixels.permute(0, 2, 3, 1).reshape(n, rows, p, cols, p * channels)
        patches = self._patches.take((n, rows, cols, p, p * channels), self.weight.dtype, pixels.device)
        patches.copy_(lines.permute(0, 1, 3, 2, 4))
        flat = patches.view(n * rows * cols, p * p * channels)
        embedded = torch.addmm(self.bias, flat, self.weight.t())
        return embedded.view(n, rows, cols, -1).permute(0, 3, 1, 2)


class Scratch:
    """A CPU tensor reused from call to call, grown (never shrunk) to the largest shape asked for.

    Other devices get a new tensor each time: their caching allocators already reuse memory, and a
    buffer shared across batches would need their streams' ordering to be safe.
    """

    def __init__(self) -> None:
        self._storage: torch.Tensor | None = None

    def take(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if device.type != "cpu":
            return torch.empty(shape, dtype=dtype, device=device)
        size = math.prod(shape)
        held = self._storage
        if held is None or held.numel() < size or held.dtype != dtype:
            held = self._storage = torch.empty(size, dtype=dtype, device=device)
        return held[:size].view(shape)


def fold_into(embeddings: nn.Module, spec: ImageSpec) -> bool:
    """Replace `embeddings.patch_embedding` with its folded form; False (nothing changed) when it
    is not a plain patch convolution, so pixels must still be normalized."""
    conv = getattr(embeddings, "patch_embedding", None)
    if not FoldedPatchEmbedding.fits(conv):
        return False
    assert isinstance(conv, nn.Conv2d)
    embeddings.patch_embedding = FoldedPatchEmbedding(conv, spec)
    return True


def _affine(spec: ImageSpec, channels: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (a, b) with normalized = received * a + b."""
    scale = torch.full((channels,), spec.device_scale, dtype=torch.float64, device=device)
    shift = torch.zeros(channels, dtype=torch.float64, device=device)
    if spec.do_normalize:
        mean = torch.tensor(spec.mean, dtype=torch.float64, device=device)
        std = torch.tensor(spec.std, dtype=torch.float64, device=device)
        scale, shift = scale / std, -mean / std
    return scale, shift
