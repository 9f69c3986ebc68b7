"""A real control block and statistics block under unique names, removed afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sie.metrics.block import StatsBlock
from sie.shm.control import ControlBlock


@dataclass
class Blocks:
    control: ControlBlock
    stats: StatsBlock


@contextmanager
def made_blocks(n_devices: int = 2, n_frontends: int = 2, n_models: int = 3) -> Iterator[Blocks]:
    stem = f"/sietest.{os.getpid()}.{uuid.uuid4().hex[:12]}"
    made = Blocks(
        ControlBlock.create(stem + ".ctl", n_devices, n_frontends, n_models),
        StatsBlock.create(stem + ".stats", n_devices, n_frontends, n_models),
    )
    try:
        yield made
    finally:
        for block in (made.control, made.stats):
            block.close()
            block.unlink()
