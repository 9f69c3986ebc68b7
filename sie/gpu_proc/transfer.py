"""A batch's host arrays to the device in one copy.

A batch's inputs (padded ids and masks, a packing plan's indices, pixels) are numpy arrays. On CUDA
a pageable host-to-device copy waits for the stream, so one per array would stall the host behind
the GPU several times a batch; here arrays of one dtype travel as one pinned buffer,
asynchronously, and are views of it on the device. On the CPU they are the numpy arrays' own memory.
"""

from __future__ import annotations

import numpy as np
import torch


def to_device(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Each array (all of one dtype) as a tensor of its shape on `device`."""
    if device.type == "cpu":
        return [torch.from_numpy(array) for array in arrays]
    flat = torch.from_numpy(np.concatenate([array.reshape(-1) for array in arrays]))
    if device.type == "cuda":
        flat = flat.pin_memory()
    moved = flat.to(device, non_blocking=True)
    parts = moved.split([array.size for array in arrays])
    return [part.view(array.shape) for part, array in zip(parts, arrays, strict=True)]
