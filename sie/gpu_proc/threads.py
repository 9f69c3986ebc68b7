"""How many intra-op threads a CPU forward pass gets: every core only when the batch is worth it.

On a CPU box the forward shares the cores with the frontends. Splitting a short forward over two
OpenMP threads saves little wall time, and the threads then spin waiting for the next parallel
region, taking a core the frontends need. Measured on the 2-core VM:
- a tiny 1-layer BERT (hidden 32) under wrk: 1,239 requests/s with one thread against 524 with
  two (the device process spent 272 against 1,464 us of CPU per item);
- a small CLIP (2 layers, hidden 64, 224 px), 8 clients of 4 JPEGs: 196 images/s against 152;
- MiniLM-L6: two threads halve a 32-token forward (20.9 -> 12.5 ms), and 32 clients get
  160 items/s against 92 with one thread.

So each batch's work decides, in FLOPs of its linear layers: 2 x weights x tokens for text, and
the adapter's own `media_flops_per_item` x items for images and audio (an adapter without one
counts as heavy). At PARALLEL_MIN_FLOPS or more, about 5 ms of one core here (MiniLM passes it
with one short text; the tiny models above never do), the batch gets every core; below it, one
thread. Timing each forward instead was tried and rejected: under contention the spinning
threads slow the forward they are part of, so a measured rule talks itself into staying parallel.

A heavy batch gets every core only when other processes leave them free: as many threads as
cores, less the cores the others kept busy over the last 0.2 s, rounded (sie.gpu_proc.cpu_load,
which leaves this process's own threads out, so a parallel forward does not count against
itself). On the 2-core VM that is two threads while the others use under half a core (MiniLM
at 32 clients: the frontends and the client use 0.04-0.23) and one while frontends decode images.
When a CPU device runs two batches at once (sie.gpu_proc.inference), each heavy one gets half of
those cores. An operator's `--torch-threads` is taken as given and never changed, and then the
device runs one batch at a time unless the cores hold two forwards of that many threads. The count
is set on each thread that runs a batch, since OpenMP keeps one per thread and the device's loop
and loader threads keep theirs at one (`no_openmp_team`).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from sie.gpu_proc.adapters.base import Adapter
    from sie.gpu_proc.cpu_load import OthersLoad

PARALLEL_MIN_FLOPS = 200e6
HEAVY = float("inf")


class ThreadPolicy:
    def __init__(self, most: int, fixed: int | None = None, others: OthersLoad | None = None) -> None:
        self._most = max(1, most)
        self._fixed = fixed
        self._others = others
        self._token_flops: weakref.WeakKeyDictionary[Adapter, float] = weakref.WeakKeyDictionary()

    def choose(self, adapter: Adapter, work: int, is_media: bool, sharing: int = 1) -> int:
        """Set and return the threads for one forward of `work` tokens (media: items), one of
        `sharing` forwards this process runs at once."""
        if self._fixed is not None:
            self._set(self._fixed)
            return self._fixed
        heavy = not self.is_light(adapter, work, is_media)
        threads = max(1, self._free_cores() // max(1, sharing)) if heavy else 1
        self._set(threads)
        return threads

    def _free_cores(self) -> int:
        busy = self._others.busy_cores() if self._others is not None else None
        if busy is None:
            return self._most
        return max(1, min(self._most, int(self._most - busy + 0.5)))

    def is_light(self, adapter: Adapter, work: int, is_media: bool) -> bool:
        """Below PARALLEL_MIN_FLOPS: a forward of a few milliseconds of one core at most."""
        per_unit = (adapter.media_flops_per_item or HEAVY) if is_media else self._per_token(adapter)
        return per_unit * work < PARALLEL_MIN_FLOPS

    def _per_token(self, adapter: Adapter) -> float:
        try:
            cached = self._token_flops.get(adapter)
        except TypeError:  # not weak-referenceable: counted for every batch
            return 2.0 * linear_weights(adapter)
        if cached is None:
            cached = self._token_flops[adapter] = 2.0 * linear_weights(adapter)
        return cached

    @staticmethod
    def _set(threads: int) -> None:
        # Asked of the calling thread every time, not remembered. The count is per thread (a light
        # batch runs on the loop's thread, a heavy one on the inference thread), and torch gives a
        # thread the count last set by any thread when it first does parallel work, replacing
        # what that thread had set before.
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def no_openmp_team() -> None:
    """Keep the calling thread's torch work on the thread itself: a CPU device's loop and loader
    threads, which run light batches and loads, never forwards worth more cores.

    libgomp keeps an OpenMP team for as long as its thread lives, and once the teams of all threads
    hold more threads than there are cores, every team sleeps between parallel regions instead of
    spinning: a wake-up per region, hundreds per forward. So only the inference threads may form
    teams (sie.gpu_proc.inference keeps theirs within the cores)."""
    torch.set_num_threads(1)


def concurrent_batches(cores: int, fixed_threads: int | None) -> int:
    """Batches a CPU device runs at once: two when its cores hold two forwards, else one."""
    return 2 if cores >= 2 * (fixed_threads or 1) else 1


def linear_weights(holder: object) -> float:
    """Weights of every Linear layer `holder` keeps, directly or one object down (embedding tables
    cost no FLOPs per token). Holding no torch modules at all (an ONNX session) counts as HEAVY."""
    modules = modules_of(holder)
    if not modules:
        return HEAVY
    return float(sum(m.weight.numel() for m in _unique_linear(modules)))


def linear_weights_of(*modules: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in _unique_linear(list(modules)))


def _unique_linear(modules: list[torch.nn.Module]) -> list[torch.nn.Linear]:
    found: dict[int, torch.nn.Linear] = {}
    for module in modules:
        found.update({id(m): m for m in module.modules() if isinstance(m, torch.nn.Linear)})
    return list(found.values())


def modules_of(holder: object, depth: int = 2) -> list[torch.nn.Module]:
    """The torch modules an adapter keeps in its attributes, directly, in a list, tuple or dict, or
    one object down (`depth`)."""
    found: list[torch.nn.Module] = []
    for value in getattr(holder, "__dict__", {}).values():
        values = list(value.values()) if isinstance(value, dict) else value
        for item in values if isinstance(values, (list, tuple)) else [values]:
            if isinstance(item, torch.nn.Module):
                found.append(item)
            elif depth > 1 and hasattr(item, "__dict__") and not isinstance(item, type):
                found += modules_of(item, depth - 1)
    return found
