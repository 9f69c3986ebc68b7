"""Small index arrays to the device in one copy.

A batch's packing plan is a handful of int64 arrays made with numpy. On CUDA each pageable
host-to-device copy waits for the stream, so one per array would stall the host behind the GPU
several times a batch; here they travel as one pinned buffer, asynchronously, and are views of it
on the device. On the CPU they are the numpy arrays' own memory.
"""

from __future__ import annotations

import numpy as np
import torch


def to_device(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Each int64 array as a tensor of its shape on `device`."""
    if device.type == "cpu":
        return [torch.from_numpy(array) for array in arrays]
    flat = torch.from_numpy(np.concatenate([array.reshape(-1) for array in arrays]))
    if device.type == "cuda":
        flat = flat.pin_memory()
    moved = flat.to(device, non_blocking=True)
    parts = moved.split([array.size for array in arrays])
    return [part.view(array.shape) for part, array in zip(parts, arrays, strict=True)]
