"""StagingRing on the CPU: its regions, its wraps and growth, and the values it hands on.

The ring's memory here is plain host memory and its wait a counter; tests/gpu_proc/test_cuda.py
runs it pinned, with real asynchronous copies in flight.
"""

from __future__ import annotations

import numpy as np
import torch

from sie.gpu_proc.transfer import ALIGN_BYTES, StagingRing, to_device


class Waits:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def ring(first_bytes: int) -> tuple[StagingRing, Waits, list[int]]:
    waits, allocations = Waits(), []

    def allocate(nbytes: int) -> torch.Tensor:
        allocations.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    return StagingRing(allocate, waits, first_bytes=first_bytes), waits, allocations


def test_staged_arrays_come_back_flat_in_their_dtype() -> None:
    staging, _, _ = ring(4096)
    ids = np.arange(12, dtype=np.int64).reshape(3, 4)
    more = np.array([7, 8, 9], np.int64)
    flat = staging.stage([ids, more])
    assert flat.dtype == torch.int64
    np.testing.assert_array_equal(flat.numpy(), np.concatenate([ids.ravel(), more]))
    halves = staging.stage([np.linspace(0, 1, 5, dtype=np.float16)])
    assert halves.dtype == torch.float16
    np.testing.assert_array_equal(halves.numpy(), np.linspace(0, 1, 5, dtype=np.float16))
    masks = staging.stage([np.array([[True, False]])])
    assert masks.dtype == torch.bool and masks.tolist() == [True, False]


def test_regions_do_not_overlap_until_the_ring_wraps_after_a_wait() -> None:
    staging, waits, allocations = ring(1024)
    staged = [staging.stage([np.full(20, i, np.int64)]) for i in range(5)]  # 160 B: a 192 B region each
    assert waits.count == 0 and allocations == [1024]
    addresses = [t.data_ptr() for t in staged]
    assert all(a % ALIGN_BYTES == 0 for a in addresses)
    assert sorted(set(addresses)) == addresses  # one after another
    for i, tensor in enumerate(staged):  # nothing overwritten before the wrap
        assert tensor.tolist() == [i] * 20
    wrapped = staging.stage([np.full(20, 99, np.int64)])  # a sixth: 6 x 192 = 1152 > 1024
    assert waits.count == 1 and staging.wraps == 1
    assert wrapped.data_ptr() == addresses[0]


def test_a_batch_larger_than_the_ring_grows_it() -> None:
    staging, waits, allocations = ring(256)
    staging.stage([np.zeros(8, np.int64)])
    big = np.arange(100, dtype=np.float32)  # 400 B: a 448 B region, room for two of them
    out = staging.stage([big])
    assert allocations == [256, 896] and waits.count == 1  # copies from the old buffer finish first
    np.testing.assert_array_equal(out.numpy(), big)


def test_empty_arrays_stage_as_empty_tensors() -> None:
    staging, _, _ = ring(256)
    empty = staging.stage([np.zeros((2, 0), np.int64)])
    assert empty.shape == (0,) and empty.dtype == torch.int64


def test_the_cpu_device_takes_the_arrays_own_memory() -> None:
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    (tensor,) = to_device([ids], torch.device("cpu"))
    assert tensor.data_ptr() == ids.ctypes.data
