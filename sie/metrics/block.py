"""The statistics segment: dense counter arrays in one shared-memory block, one writer per row.

Each frontend writes only its own rows, each device process only its own, the supervisor only its
section; `/metrics`, in any frontend, reads and sums them all. Writers take no lock: a counter is
one aligned 8-byte word, so a reader sees either the old or the new value, and a scrape that
races a request at worst lags it by one count. The segment belongs to the supervisor and outlives
any child, so a restarted frontend or device carries on with its row: counters never go back.
"""

from __future__ import annotations

import contextlib
import mmap

import numpy as np
import posix_ipc

from sie.metrics.labels import (
    BATCH_SIZE_BUCKETS,
    BATCH_TOKENS_BUCKETS,
    CODES,
    DIRECTIONS,
    LATENCY_BUCKETS_S,
    ROUTES,
    STAGES,
    STATUSES,
)

MAGIC = 0x5349_4553_5441_0001  # "SIESTA" + this layout's version: bump with any section change
U8, F8 = np.dtype("<u8"), np.dtype("<f8")
Section = tuple[str, np.dtype, tuple[int, ...]]


def sections(n_devices: int, n_frontends: int, n_models: int) -> list[Section]:
    d, f, m = n_devices, n_frontends, n_models + 1  # the last model slot is "none / unknown"
    return [
        ("header", U8, (4,)),  # magic, n_devices, n_frontends, n_models
        # frontends: one row each
        ("requests", U8, (f, len(ROUTES), m, len(STATUSES) + 1)),
        ("errors", U8, (f, m, len(CODES))),
        ("items", U8, (f, m)),
        ("tokens", U8, (f, m)),
        ("disconnects", U8, (f, m)),
        ("in_flight", U8, (f,)),  # API requests started and not yet answered (a gauge)
        ("rebalances", U8, (f,)),  # connections closed to move their client to another frontend
        ("stage_buckets", U8, (f, len(STAGES), m, len(LATENCY_BUCKETS_S) + 1)),
        ("stage_sum_s", F8, (f, len(STAGES), m)),
        # devices: one row each
        ("batch_size_buckets", U8, (d, m, len(BATCH_SIZE_BUCKETS) + 1)),
        ("batch_tokens_buckets", U8, (d, m, len(BATCH_TOKENS_BUCKETS) + 1)),
        ("batch_items", U8, (d, m)),
        ("batch_tokens", U8, (d, m)),
        ("padded_tokens", U8, (d, m)),
        ("forward_s", F8, (d, m)),
        ("failed_batches", U8, (d, m)),
        ("cancelled_items", U8, (d, m)),
        ("loads", U8, (d, m)),
        ("load_failures", U8, (d, m)),
        ("unloads", U8, (d, m)),
        ("load_s", F8, (d, m)),
        ("overflow", U8, (d, f)),  # result messages waiting for room in a response ring
        ("pci", U8, (d, 4)),  # has_pci, domain, bus, device: how /metrics finds the GPU in NVML
        # the supervisor
        ("supervisor_pid", U8, (1,)),
        ("device_pids", U8, (d,)),
        ("frontend_pids", U8, (f,)),
        ("device_restarts", U8, (d,)),
        ("frontend_restarts", U8, (f,)),
        ("ring_used_bytes", U8, (d, f, len(DIRECTIONS))),
        ("ring_pending", U8, (d, f, len(DIRECTIONS))),
        ("ring_capacity_bytes", U8, (len(DIRECTIONS),)),
    ]


def _padded(nbytes: int) -> int:
    return (nbytes + 63) & ~63


def _size(layout: list[Section]) -> int:
    return sum(_padded(dtype.itemsize * int(np.prod(shape))) for _, dtype, shape in layout)


class StatsBlock:
    def __init__(self, name: str, mm: mmap.mmap, dims: tuple[int, int, int]) -> None:
        self.name = name
        self.n_devices, self.n_frontends, self.n_models = dims
        self._mm = mm
        self.v: dict[str, np.ndarray] = {}
        pos = 0
        for key, dtype, shape in sections(*dims):
            count = int(np.prod(shape))
            self.v[key] = np.frombuffer(mm, dtype, count=count, offset=pos).reshape(shape)
            pos += _padded(dtype.itemsize * count)

    @classmethod
    def create(cls, name: str, n_devices: int, n_frontends: int, n_models: int) -> StatsBlock:
        dims = (n_devices, n_frontends, n_models)
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=_size(sections(*dims)))
        block = cls(name, _map(shm), dims)
        block.v["header"][1:] = dims
        block.v["header"][0] = MAGIC  # last: a reader checking magic sees complete dimensions
        return block

    @classmethod
    def attach(cls, name: str) -> StatsBlock:
        mm = _map(posix_ipc.SharedMemory(name))
        head = np.frombuffer(mm, U8, count=4).tolist()
        if head[0] != MAGIC:
            mm.close()
            raise RuntimeError(f"statistics block {name} has the wrong magic or layout version")
        return cls(name, mm, (head[1], head[2], head[3]))

    @property
    def none_slot(self) -> int:
        """The model index of requests that name no model, or one that does not exist."""
        return self.n_models

    def close(self) -> None:
        self.v.clear()
        with contextlib.suppress(BufferError):  # a caller still holds a view; it unmaps with it
            self._mm.close()

    def unlink(self) -> None:
        with contextlib.suppress(posix_ipc.ExistentialError):
            posix_ipc.unlink_shared_memory(self.name)


def _map(shm: posix_ipc.SharedMemory) -> mmap.mmap:
    mm = mmap.mmap(shm.fd, shm.size)
    shm.close_fd()
    return mm
