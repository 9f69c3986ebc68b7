"""sie's frontend app with a device that answers at once, for `bench_overhead.py`.

    APP_STACK_MODELS=DIR hypercorn -w 2 -k uvloop _app_stack:app   (PYTHONPATH=scripts)

The same Starlette app a frontend serves (`sie.frontend.app.build_app`: middleware, parsing,
validation, tokenizing, post-processing, rendering, its statistics rows and hypercorn's one-write
responses), but `submit` answers in the event loop with unit vectors instead of a trip through the
rings to a device process. Between the bare HTTP stack and the whole server, it shows what the
app costs apart from the device round trip. Encode only: it answers dense rows, nothing else.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np

from sie.catalog import Catalog, load_catalog
from sie.frontend import h11_writes
from sie.frontend.app import build_app
from sie.frontend.devices import Placement
from sie.frontend.operations import Operations
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.metrics.block import StatsBlock
from sie.metrics.recorders import FrontendRecorder
from sie.settings import Settings
from sie.shm.control import ModelState
from sie.shm.layout import ResultKind, TokenBatch


class InstantDevices:
    """`sie.frontend.devices.Devices` with every model loaded and answers made in-process."""

    def __init__(self, catalog: Catalog) -> None:
        self._dims = [model.dense_dim() or 1 for model in catalog.models]

    def is_draining(self) -> bool:
        return False

    def model_state(self, slot: int) -> ModelState:
        return ModelState.LOADED

    def placements(self, slot: int) -> list[Placement]:
        return []

    def model_error(self, slot: int) -> str:
        return ""

    def is_ready(self, preload_slots: list[int]) -> bool:
        return True

    def can_retry_load(self, slot: int) -> bool:
        return False

    def loads(self, slot: int) -> int:
        return 1

    def request_load(self, slot: int) -> None:
        return None

    async def submit(self, batch: TokenBatch) -> Results:
        await asyncio.sleep(0)  # one loop turn, as a real answer never comes within the caller's turn
        rows = np.zeros((batch.n_items, self._dims[batch.model_slot]), np.float32)
        rows[:, 0] = 1.0  # a unit vector, so normalizing does its usual work
        return Results({ResultKind.DENSE: rows}, {}, [], queue_ms=0.0, inference_ms=0.0)


def _build() -> object:
    catalog = load_catalog(os.environ["APP_STACK_MODELS"])
    stats = StatsBlock.create(f"/sie-appstack-{os.getpid()}", 1, 1, len(catalog.models))
    stats.unlink()  # the mapping outlives its name, and nothing is left in /dev/shm at exit
    state = FrontendState(
        settings=Settings(),
        catalog=catalog,
        devices=InstantDevices(catalog),
        ops=Operations(recorder=FrontendRecorder(stats, 0)),
    )
    for model in catalog.models:
        state.tokenizers.get(model)
    h11_writes.install()
    return build_app(state)


app = _build()
