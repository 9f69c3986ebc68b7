"""How many of this process's cores other processes keep busy, from the system's per-CPU times.

A heavy CPU forward gets every core only if the cores are free: when the frontends are busy
(decoding images, say), a second OpenMP thread finds no idle core and spins on one they need
(figures in docs/performance.md). Busy time of the cores this process may run on comes from
psutil's per-CPU times; this process's own CPU time (the forward's threads included) is taken
out, so a parallel forward does not count against itself. Readings are at least WINDOW_S apart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import psutil

WINDOW_S = 0.2


def read_busy_s(cpus: frozenset[int]) -> float | None:
    """Seconds the given CPUs have spent busy since boot, or None where the system does not tell."""
    try:
        per_cpu = psutil.cpu_times(percpu=True)
    except (OSError, psutil.Error):
        return None
    # Busy is all but idle, iowait and steal (time the CPU had nothing of ours to run).
    return sum(t.user + t.nice + t.system + t.irq + t.softirq for i, t in enumerate(per_cpu) if i in cpus)


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
