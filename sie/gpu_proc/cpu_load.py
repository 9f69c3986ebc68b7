"""How many of this process's cores other processes keep busy, measured from /proc/stat.

A heavy CPU forward gets every core only if the cores are free. When the frontends are busy
(decoding and resizing images, say), a second OpenMP thread finds no idle core, and it spins
between the forward's operations on a core the frontends need. Measured on the 2-core VM with a
small CLIP, 8 clients of 4 JPEGs: the device spent 1.7-2.1 ms of CPU per image with two threads on
its heavy batches, 1.2-1.3 ms with one, and the server did 201-223 images/s against 238-262.

Busy time of the cores this process may run on comes from /proc/stat; this process's own CPU time
(the forward's threads included) is taken out, so a parallel forward does not count against
itself. Readings are at least WINDOW_S apart, so a batch pays for a read (about 20 us) at most
five times a second.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

WINDOW_S = 0.2
_USER_HZ = os.sysconf("SC_CLK_TCK")


def read_busy_s(cpus: frozenset[int]) -> float | None:
    """Seconds the given CPUs have spent busy since boot, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat", "rb") as stat:
            lines = stat.read().split(b"\n")
    except OSError:
        return None
    busy = 0
    for line in lines[1:]:
        if not line.startswith(b"cpu"):
            break
        name, *fields = line.split()
        if int(name[3:]) in cpus:
            # user nice system idle iowait irq softirq steal ...: busy is all but idle, iowait, steal
            values = [int(field) for field in fields[:8]]
            busy += sum(values) - values[3] - values[4] - values[7]
    return busy / _USER_HZ


class OthersLoad:
    """Cores kept busy by other processes over the last window, on the CPUs this one may use."""

    def __init__(
        self,
        cpus: frozenset[int] | None = None,
        window_s: float = WINDOW_S,
        read_busy: Callable[[frozenset[int]], float | None] = read_busy_s,
        own_cpu_s: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cpus = cpus if cpus is not None else frozenset(os.sched_getaffinity(0))
        self._window_s = window_s
        self._read_busy = read_busy
        self._own_cpu_s = own_cpu_s
        self._clock = clock
        self._last = self._sample()
        self._busy_cores: float | None = None

    def busy_cores(self) -> float | None:
        """Other processes' busy cores over the last completed window; None until one completes,
        or where the system does not tell."""
        if self._clock() - self._last[0] >= self._window_s:
            now = self._sample()
            if now[1] is not None and self._last[1] is not None:
                others_s = (now[1] - self._last[1]) - (now[2] - self._last[2])
                self._busy_cores = max(0.0, others_s / (now[0] - self._last[0]))
            self._last = now
        return self._busy_cores

    def _sample(self) -> tuple[float, float | None, float]:
        return self._clock(), self._read_busy(self._cpus), self._own_cpu_s()
