"""The control block: one small shared segment with the state every process needs to see.

Each field has one writer at a time:
- the supervisor writes `started`, `leaving`, `draining`, each device's `generation`, the
  DOWN/STARTING device states (only while that device process is not running), every ring pair's
  generation and frontend pids;
- a device process writes its own UP state, heartbeat, and its per-model states, errors, memory,
  last use and queue depth.
Frontends only read. The names of the rings (which embed generations) are the truth; this block is
how a process learns that a name changed, cheaply, on every request.
"""

from __future__ import annotations

import contextlib
import mmap
import time
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import posix_ipc

from sie.shm.layout import LAYOUT_VERSION

# "SIECTL" + the block's own version. Bump the last digits with any change to HEADER, DEVICE or MODEL:
# a process from another build then refuses to attach instead of reading fields at wrong offsets.
# (The version field holds LAYOUT_VERSION, the ring message format, which this block shares.)
MAGIC = 0x5349_4543_544C_0005
# A load error names where the weights were looked for and how to fix it: room for both.
ERROR_BYTES = 1000


class DeviceState(IntEnum):
    DOWN = 0
    STARTING = 1
    UP = 2
    STOPPING = 3


class ModelState(IntEnum):
    AVAILABLE = 0
    LOADING = 1
    LOADED = 2
    FAILED = 3
    UNLOADING = 4


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """What one device reports about one model besides its state."""

    memory_bytes: int
    last_used_ns: int  # time.monotonic_ns() of the last admitted request or batch (or the load); 0: never
    queue_depth: int
    loads: int = 0  # how many times this device loaded it (reloads after eviction count)


HEADER = np.dtype(
    [
        ("magic", "<u8"),
        ("version", "<u4"),
        ("n_devices", "<u4"),
        ("n_frontends", "<u4"),
        ("n_models", "<u4"),
        ("draining", "<u4"),
        ("started", "<u4"),  # the first time every device was up with its preloads (systemd READY)
        ("leaving", "<u4"),  # told to stop: not ready for balancers, still serving (drain delay)
        ("catalog_generation", "<u4"),  # bumped by the supervisor after it rewrote the shared catalog
        ("_pad", "V24"),
    ]
)
DEVICE = np.dtype(
    [
        ("state", "<u4"),
        ("generation", "<u4"),
        ("pid", "<u4"),
        ("restarts", "<u4"),
        ("heartbeat_ns", "<u8"),
        ("memory_used_bytes", "<u8"),  # what the device's memory manager measured, about every second
        ("memory_capacity_bytes", "<u8"),
        ("_pad", "V24"),
    ]
)
MODEL = np.dtype(
    [
        ("state", "<u4"),
        ("error_len", "<u4"),
        ("memory_bytes", "<u8"),
        ("last_used_ns", "<u8"),  # time.monotonic_ns(): one clock for every process on the box
        ("queue_depth", "<u4"),  # items waiting in the batcher, refreshed every few ms
        ("loads", "<u4"),  # times loaded on this device
        ("state_ns", "<u8"),  # time.monotonic_ns() of the last state change (failed-load cool-down)
        ("error", f"V{ERROR_BYTES}"),
    ]
)
FRONTEND = np.dtype([("pid", "<u4"), ("generation", "<u4")])


def _sections(n_devices: int, n_frontends: int, n_models: int) -> list[tuple[str, np.dtype, tuple[int, ...]]]:
    return [
        ("header", HEADER, (1,)),
        ("devices", DEVICE, (n_devices,)),
        ("models", MODEL, (n_devices, max(n_models, 1))),
        ("pair_gen", np.dtype("<u4"), (n_devices, n_frontends)),
        ("frontends", FRONTEND, (n_frontends,)),
    ]


def _padded(nbytes: int) -> int:
    return (nbytes + 63) & ~63


def _map(shm: posix_ipc.SharedMemory) -> mmap.mmap:
    mm = mmap.mmap(shm.fd, shm.size)
    shm.close_fd()
    return mm


class ControlBlock:
    def __init__(self, name: str, mm: mmap.mmap, dims: tuple[int, int, int]) -> None:
        self.name = name
        self._mm = mm
        self._views: dict[str, np.ndarray] = {}
        pos = 0
        for key, dtype, shape in _sections(*dims):
            count = int(np.prod(shape))
            self._views[key] = np.frombuffer(mm, dtype, count=count, offset=pos).reshape(shape)
            pos += _padded(dtype.itemsize * count)
        self.header = self._views["header"]
        self.devices = self._views["devices"]
        self.models = self._views["models"]
        self.pair_gen = self._views["pair_gen"]
        self.frontends = self._views["frontends"]

    @classmethod
    def create(cls, name: str, n_devices: int, n_frontends: int, n_models: int) -> ControlBlock:
        dims = (n_devices, n_frontends, n_models)
        size = sum(_padded(d.itemsize * int(np.prod(s))) for _, d, s in _sections(*dims))
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=size)
        block = cls(name, _map(shm), dims)
        block.header["n_devices"], block.header["n_frontends"] = n_devices, n_frontends
        block.header["n_models"], block.header["version"] = n_models, LAYOUT_VERSION
        block.header["magic"] = MAGIC  # last: a reader checking magic sees a complete header
        return block

    @classmethod
    def attach(cls, name: str) -> ControlBlock:
        mm = _map(posix_ipc.SharedMemory(name))
        head = np.frombuffer(mm, HEADER, count=1)[0]
        if int(head["magic"]) != MAGIC or int(head["version"]) != LAYOUT_VERSION:
            raise RuntimeError(f"control block {name} has the wrong magic or layout version")
        dims = int(head["n_devices"]), int(head["n_frontends"]), int(head["n_models"])
        del head
        return cls(name, mm, dims)

    # -- readers ------------------------------------------------------------------------------
    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def n_frontends(self) -> int:
        return len(self.frontends)

    @property
    def is_draining(self) -> bool:
        return bool(self.header["draining"][0])

    @property
    def is_started(self) -> bool:
        return bool(self.header["started"][0])

    @property
    def is_leaving(self) -> bool:
        return bool(self.header["leaving"][0])

    def device_state(self, device: int) -> DeviceState:
        return DeviceState(int(self.devices["state"][device]))

    def heartbeat_ns(self, device: int) -> int:
        """time.monotonic_ns() of the device loop's latest beat."""
        return int(self.devices["heartbeat_ns"][device])

    def device_generation(self, device: int) -> int:
        return int(self.devices["generation"][device])

    def pair_generation(self, device: int, frontend: int) -> int:
        return int(self.pair_gen[device, frontend])

    def model_state(self, device: int, slot: int) -> ModelState:
        return ModelState(int(self.models["state"][device, slot]))

    def model_error(self, device: int, slot: int) -> str:
        record = self.models[device, slot]
        raw = bytes(record["error"])[: int(record["error_len"])]
        return raw.decode(errors="replace")

    def model_usage(self, device: int, slot: int) -> ModelUsage:
        record = self.models[device, slot]
        return ModelUsage(
            int(record["memory_bytes"]),
            int(record["last_used_ns"]),
            int(record["queue_depth"]),
            int(record["loads"]),
        )

    def model_state_ns(self, device: int, slot: int) -> int:
        """time.monotonic_ns() when the model entered its current state on this device."""
        return int(self.models["state_ns"][device, slot])

    def device_memory(self, device: int) -> tuple[int, int]:
        """(used, capacity) bytes as the device last measured them; (0, 0) before it did."""
        record = self.devices[device]
        return int(record["memory_used_bytes"]), int(record["memory_capacity_bytes"])

    # -- writers (see the module docstring for who may call which) -----------------------------
    def set_draining(self) -> None:
        self.header["draining"] = 1

    def catalog_generation(self) -> int:
        return int(self.header["catalog_generation"][0])

    def set_catalog_generation(self, generation: int) -> None:
        self.header["catalog_generation"] = generation

    def set_started(self) -> None:
        self.header["started"] = 1

    def set_leaving(self) -> None:
        self.header["leaving"] = 1

    def set_device_state(self, device: int, state: DeviceState) -> None:
        self.devices["state"][device] = int(state)

    def bump_device_generation(self, device: int) -> int:
        self.devices["generation"][device] += 1
        return self.device_generation(device)

    def set_device_pid(self, device: int, pid: int) -> None:
        self.devices["pid"][device] = pid

    def heartbeat(self, device: int) -> None:
        self.devices["heartbeat_ns"][device] = time.monotonic_ns()

    def set_pair_generation(self, device: int, frontend: int, generation: int) -> None:
        self.pair_gen[device, frontend] = generation

    def set_model_state(self, device: int, slot: int, state: ModelState, error: str = "") -> None:
        """Enter a state; a load clears the last error, and counts."""
        record = self.models[device, slot]
        if error:
            raw = error.encode()[:ERROR_BYTES].decode(errors="ignore").encode()  # whole characters only
            record["error"] = raw.ljust(ERROR_BYTES, b"\0")
            record["error_len"] = len(raw)
        elif state == ModelState.LOADED:
            record["error_len"] = 0
            self.models["loads"][device, slot] += 1
        self.models["state_ns"][device, slot] = time.monotonic_ns()
        self.models["state"][device, slot] = int(state)

    def set_device_memory(self, device: int, used_bytes: int, capacity_bytes: int) -> None:
        self.devices["memory_used_bytes"][device] = used_bytes
        self.devices["memory_capacity_bytes"][device] = capacity_bytes

    def set_model_memory(self, device: int, slot: int, memory_bytes: int) -> None:
        self.models["memory_bytes"][device, slot] = memory_bytes

    def touch_model(self, device: int, slot: int) -> None:
        self.models["last_used_ns"][device, slot] = time.monotonic_ns()

    def set_queue_depths(self, device: int, depths: np.ndarray) -> None:
        """One device's pending items per model slot, all at once (the loop calls this, throttled)."""
        self.models["queue_depth"][device, : len(depths)] = depths

    def close(self) -> None:
        self._views.clear()
        self.header = self.devices = self.models = self.pair_gen = self.frontends = None  # type: ignore[assignment]
        with contextlib.suppress(BufferError):  # a caller still holds a view; it unmaps with it
            self._mm.close()

    def unlink(self) -> None:
        with contextlib.suppress(posix_ipc.ExistentialError):
            posix_ipc.unlink_shared_memory(self.name)
