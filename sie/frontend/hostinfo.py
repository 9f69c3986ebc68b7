"""Memory of the devices and of every server process, read when `/metrics` is scraped.

GPUs through NVML (`nvidia-ml-py`), found by the PCI address the device process published, so
CUDA's and NVML's different orderings of the same GPUs cannot mix them up. A CPU device's memory
is the host's, and each process's memory and CPU time its own (both from psutil). Nothing here
touches CUDA or torch.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Memory:
    used_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    rss_bytes: int
    anonymous_bytes: int  # RSS less file and shared-memory pages: what a leak would grow
    cpu_s: float


def host_memory() -> Memory:
    vm = psutil.virtual_memory()
    return Memory(int(vm.total - vm.available), int(vm.total))


def process_usage(pid: int) -> ProcessUsage | None:
    """Memory and CPU time of one process; None once it is gone, a zombie, or not ours to read."""
    if pid <= 0:
        return None
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            memory, cpu = process.memory_info(), process.cpu_times()
    except psutil.Error:
        return None
    if not memory.rss:  # a zombie keeps its pid but no memory
        return None
    # Linux's `shared` is the file-backed and shared-memory pages: what is left is RssAnon.
    return ProcessUsage(int(memory.rss), int(memory.rss - memory.shared), cpu.user + cpu.system)


class Nvml:
    """NVML, initialised on first use; every failure means "no figure", never a failed scrape."""

    def __init__(self) -> None:
        self._ready: bool | None = None

    def gpu_memory(self, domain: int, bus: int, device: int) -> Memory | None:
        if not self._init():
            return None
        import pynvml

        address = f"{domain:08x}:{bus:02x}:{device:02x}.0"
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(address.encode())
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        except pynvml.NVMLError as exc:
            log.debug("NVML has no memory figure for %s: %s", address, exc)
            return None
        return Memory(int(info.used), int(info.total))

    def _init(self) -> bool:
        if self._ready is None:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._ready = True
            except Exception as exc:  # no driver, no library: GPU memory is simply not reported
                log.warning("NVML unavailable; GPU memory is not reported: %s", exc)
                self._ready = False
        return self._ready
