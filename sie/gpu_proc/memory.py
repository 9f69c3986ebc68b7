"""Measuring a device's memory: what is used and what there is, read from the system, not guessed.

CPU: the process's resident set against the memory it could still get (its RSS plus what the
system has available), via psutil. CUDA: device-wide use from `torch.cuda.mem_get_info`. With
`--device-memory-bytes` the capacity is that number instead, and use is what this device holds:
on CUDA this process's own memory (NVML's per-process figure, which counts the CUDA context, else
torch's reserved bytes), so several servers share one GPU; on CPU the bytes its loaded models hold
(parameters and buffers, as each load measured them). Not the RSS there: memory-mapped weights
count in it only as far as a forward has touched their pages, so a bound on it would let models
in that do not fit once used.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sie.heap import glibc

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemoryReading:
    used_bytes: int
    capacity_bytes: int


class MemoryProbe(Protocol):
    def read(self) -> MemoryReading: ...

    def release(self) -> None:
        """Give memory freed by dropped weights back, so the next reading sees it gone."""
        ...


class CpuProbe:
    def __init__(self, capacity_bytes: int | None = None, held_bytes: Callable[[], int] = lambda: 0) -> None:
        """`held_bytes`: what the loaded models hold, the use counted against `capacity_bytes`."""
        import psutil

        self._psutil = psutil
        self._process = psutil.Process()
        self._capacity = capacity_bytes
        self._held_bytes = held_bytes
        self._libc = glibc()

    def read(self) -> MemoryReading:
        if self._capacity:
            return MemoryReading(self._held_bytes(), self._capacity)
        rss = int(self._process.memory_info().rss)
        return MemoryReading(rss, rss + int(self._psutil.virtual_memory().available))

    def release(self) -> None:
        # glibc keeps freed heap pages mapped; trimming returns them, so RSS falls after an unload.
        if self._libc is not None:
            self._libc.malloc_trim(0)


class CudaProbe:
    def __init__(self, device: str, capacity_bytes: int | None = None) -> None:
        import torch

        self._torch = torch
        self._device = torch.device(device)
        self._capacity = capacity_bytes
        self._nvml: Any = None
        self._handle: Any = None
        if capacity_bytes:
            self._nvml, self._handle = _nvml_handle(torch, self._device)

    def read(self) -> MemoryReading:
        cuda = self._torch.cuda
        free, total = cuda.mem_get_info(self._device)
        if not self._capacity:
            return MemoryReading(int(total - free), int(total))
        return MemoryReading(self._own_bytes(), self._capacity)

    def _own_bytes(self) -> int:
        reserved = int(self._torch.cuda.memory_reserved(self._device))
        if self._handle is None:
            return reserved
        try:
            processes = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:
            return reserved
        mine = [p.usedGpuMemory for p in processes if p.pid == os.getpid() and p.usedGpuMemory]
        return max(reserved, int(sum(mine)))  # NVML misses pids inside some containers

    def release(self) -> None:
        self._torch.cuda.empty_cache()


def probe_for(
    device: str, capacity_bytes: int | None = None, held_bytes: Callable[[], int] = lambda: 0
) -> MemoryProbe:
    if device.startswith("cuda"):
        return CudaProbe(device, capacity_bytes)
    return CpuProbe(capacity_bytes, held_bytes)


def _nvml_handle(torch: Any, device: Any) -> tuple[Any, Any]:
    """NVML and the handle of the GPU torch calls `device` (matched by UUID: indices may differ)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception as exc:  # no NVML (or no such device): torch's figure alone
        log.info("NVML unavailable; using torch's reserved memory", extra={"error": str(exc)})
        return None, None
    return pynvml, handle
