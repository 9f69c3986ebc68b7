"""Fakes for the lifecycle tests: adapters that only count, a probe whose memory the test sets."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sie.catalog import Catalog
from sie.gpu_proc.memory import MemoryReading
from sie.model_config import ModelConfig, parse_model_config
from sie.shm.control import ControlBlock, ModelState

MIB = 1 << 20


@dataclass
class FakeAdapter:
    name: str
    size: int
    closed: bool = False

    def memory_bytes(self) -> int:
        return self.size

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeProbe:
    """Memory use is the sum of the live adapters' sizes plus a base the test may change."""

    capacity: int
    base: int = 0
    live: dict[str, FakeAdapter] = field(default_factory=dict)
    releases: int = 0

    def read(self) -> MemoryReading:
        return MemoryReading(
            self.base + sum(a.size for a in self.live.values() if not a.closed), self.capacity
        )

    def release(self) -> None:
        self.releases += 1


def catalog_of(tmp_path: Path, names: list[str]) -> Catalog:
    models: list[ModelConfig] = []
    for name in names:
        folder = tmp_path / name.replace("/", "__")
        folder.mkdir(exist_ok=True)
        models.append(parse_model_config({"sie_id": name, "weights": {"path": str(folder)}}))
    return Catalog(models, keep_order=True)


def new_control(n_models: int) -> ControlBlock:
    return ControlBlock.create(f"/sie.lctest{uuid.uuid4().hex[:8]}.{os.getpid()}.ctl", 1, 1, n_models)


def fake_loader(
    probe: FakeProbe, size: int = 10 * MIB, fail: set[str] | None = None
) -> Callable[..., FakeAdapter]:
    def load(config: ModelConfig, weights_dir: Path, device: str) -> FakeAdapter:
        if fail and config.sie_id in fail:
            raise OSError(f"no weights in {weights_dir.name}")
        adapter = FakeAdapter(config.sie_id, size)
        probe.live[config.sie_id] = adapter
        return adapter

    return load


def wait_state(control: ControlBlock, slot: int, state: ModelState, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while control.model_state(0, slot) != state:
        assert time.monotonic() < deadline, f"slot {slot} is {control.model_state(0, slot)!r}, not {state!r}"
        time.sleep(0.005)
