"""A batch's host arrays to the device in one copy.

A batch's inputs (padded ids and masks, a packing plan's indices, pixels) are numpy arrays. On CUDA
a pageable host-to-device copy waits for the stream, so one per array would stall the host behind
the GPU several times a batch; here arrays of one dtype travel as one pinned buffer,
asynchronously, and are views of it on the device. On the CPU they are the numpy arrays' own memory.

The pinned buffer is a region of a ring that lives as long as the thread: page-locking fresh memory
for every copy (`Tensor.pin_memory`) cost more than the copy itself for a small batch.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np
import torch

ALIGN_BYTES = 64
FIRST_RING_BYTES = 4 << 20


def to_device(arrays: list[np.ndarray], device: torch.device) -> list[torch.Tensor]:
    """Each array (all of one dtype) as a tensor of its shape on `device`."""
    if device.type == "cpu":
        return [torch.from_numpy(array) for array in arrays]
    if device.type == "cuda":
        flat = _ring(device).stage(arrays)
    else:
        flat = torch.from_numpy(np.concatenate([array.reshape(-1) for array in arrays]))
    moved = flat.to(device, non_blocking=True)
    parts = moved.split([array.size for array in arrays])
    return [part.view(array.shape) for part, array in zip(parts, arrays, strict=True)]


class StagingRing:
    """Host memory that inputs pass through on their way to one device, reused round and round.

    Each `stage` takes the next free region. Copies out of the ring run asynchronously on the
    device, so before the ring wraps to its start (or grows) it waits for the device: a region is
    written again only after the copy that read it is done. A device process finishes each batch
    before it stages the next, so that wait finds the device idle.
    """

    def __init__(
        self,
        allocate: Callable[[int], torch.Tensor],
        wait_for_copies: Callable[[], None],
        first_bytes: int = FIRST_RING_BYTES,
    ) -> None:
        self._allocate = allocate
        self._wait_for_copies = wait_for_copies
        self._first_bytes = first_bytes
        self._buffer: torch.Tensor | None = None
        self._view = np.empty(0, np.uint8)
        self._head = 0
        self.wraps = 0

    def stage(self, arrays: list[np.ndarray]) -> torch.Tensor:
        """The arrays, flattened end to end, in the ring: a 1-D tensor of their dtype."""
        dtype = arrays[0].dtype
        nbytes = sum(array.size for array in arrays) * dtype.itemsize
        start = self._reserve(nbytes)
        assert self._buffer is not None
        out = self._view[start : start + nbytes].view(dtype)
        np.concatenate([array.reshape(-1) for array in arrays], out=out)
        return self._buffer[start : start + nbytes].view(_torch_dtype(dtype))

    def _reserve(self, nbytes: int) -> int:
        size = -(-max(nbytes, 1) // ALIGN_BYTES) * ALIGN_BYTES
        capacity = len(self._view)
        if size > capacity:
            if self._buffer is not None:
                self._wait_for_copies()  # the old buffer may still be read
            capacity = max(self._first_bytes, 2 * capacity, 2 * size)
            self._buffer = self._allocate(capacity)
            self._view = self._buffer.numpy()
            self._head = 0
        elif self._head + size > capacity:
            self._wait_for_copies()
            self._head = 0
            self.wraps += 1
        start = self._head
        self._head += size
        return start


_local = threading.local()


@functools.cache
def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype)).dtype


def _ring(device: torch.device) -> StagingRing:
    """This thread's ring for `device`: two inference threads never stage into one ring."""
    rings: dict[torch.device, StagingRing] = _local.__dict__.setdefault("rings", {})
    ring = rings.get(device)
    if ring is None:

        def allocate(nbytes: int) -> torch.Tensor:
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

        def wait_for_copies() -> None:  # every stream: whichever one a copy went out on
            torch.cuda.synchronize(device)

        ring = rings[device] = StagingRing(allocate, wait_for_copies)
    return ring
