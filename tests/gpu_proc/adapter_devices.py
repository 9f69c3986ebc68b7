"""Devices that run each batch through a real adapter in this process, for running a family's extract
runner end to end without a server: the request goes through the ring layout, a Batcher and the
Runner (tests.gpu_proc.device_path), and comes back as a frontend's Results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sie.catalog import Catalog
from sie.frontend.devices import Placement
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, bind
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.model_config import parse_model_config
from sie.settings import Settings
from sie.shm.control import ModelState
from sie.shm.layout import TokenBatch
from tests.gpu_proc.device_path import device_run


class AdapterDevices:
    """Satisfies `sie.frontend.devices.Devices` for loaded models; records every batch."""

    def __init__(self, adapters: dict[int, Adapter]) -> None:
        self.adapters = adapters
        self.batches: list[TokenBatch] = []

    def is_draining(self) -> bool:
        return False

    def model_state(self, slot: int) -> ModelState:
        return ModelState.LOADED

    def model_error(self, slot: int) -> str:
        return ""

    def placements(self, slot: int) -> list[Placement]:
        return []  # no queue anywhere: every request has room

    def can_retry_load(self, slot: int) -> bool:
        return False

    def request_load(self, slot: int) -> None:
        raise AssertionError("every model is loaded")

    async def submit(self, batch: TokenBatch) -> Results:
        self.batches.append(batch)
        outputs = device_run(self.adapters[batch.model_slot], batch)
        ragged = {}
        for kind, output in outputs.items():
            offsets = output.row_offsets
            assert offsets is not None
            ragged[kind] = [output.values[offsets[i] : offsets[i + 1]] for i in range(batch.n_items)]
        return Results({}, ragged, [], queue_ms=0.0, inference_ms=0.0)


def in_process(raw: dict[str, Any], weights: Path) -> tuple[FrontendState, Target, AdapterDevices]:
    """A frontend state serving one model (its YAML mapping `raw`, weights in `weights`) in process."""
    config = parse_model_config(raw)
    devices = AdapterDevices({0: load_adapter(config, weights, "cpu")})
    state = FrontendState(settings=Settings(), catalog=Catalog([config]), devices=devices)  # type: ignore[arg-type]
    return state, bind(config.sie_id, 0, config, None, None), devices
