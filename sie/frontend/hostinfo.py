"""Memory of the devices and of every server process, read when `/metrics` is scraped.

GPUs through NVML (`nvidia-ml-py`), found by the PCI address the device process published, so
CUDA's and NVML's different orderings of the same GPUs cannot mix them up. A CPU device's memory
is the host's (`psutil`). Nothing here touches CUDA or torch.
"""

from __future__ import annotations

import logging
import os
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


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_usage(pid: int) -> ProcessUsage | None:
    """Memory and CPU time of one process, from two /proc reads (psutil's Process costs several
    more per scrape: it parses the stat file again to learn the start time)."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
        with open(f"/proc/{pid}/status", "rb") as status_file:
            status = status_file.read()
    except OSError:  # gone, or not ours to read
        return None
    # Fields after the command name, which may itself hold spaces and parentheses.
    fields = stat[stat.rindex(b")") + 2 :].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    kib: dict[bytes, int] = {}
    for line in status.splitlines():
        if line.startswith((b"VmRSS:", b"RssAnon:")):
            name, value = line.split(b":", 1)
            kib[name] = int(value.split()[0])
    if b"VmRSS" not in kib:  # a zombie has no memory lines
        return None
    rss = kib[b"VmRSS"] * 1024
    return ProcessUsage(rss, kib.get(b"RssAnon", kib[b"VmRSS"]) * 1024, cpu_s)


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
