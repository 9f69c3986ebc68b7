"""Which models this device holds, and loading them on first use without stalling the loop.

Loads run on one loader thread, so a slow load of one model never delays batches of another.
The state of every model is published in the control block, where frontends read it to decide
between submitting, answering 503 MODEL_LOADING, or 502 MODEL_LOAD_FAILED.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sie.gpu_proc.adapters.base import Adapter
from sie.model_config import Catalog, ModelConfig, resolve_weights_dir
from sie.shm.control import ControlBlock, ModelState

log = logging.getLogger(__name__)

AdapterLoader = Callable[[ModelConfig, Path, str], Adapter]


class Registry:
    def __init__(
        self,
        catalog: Catalog,
        control: ControlBlock,
        device_index: int,
        device: str,
        loader: AdapterLoader,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.catalog = catalog
        self.control = control
        self.device_index = device_index
        self.device = device
        self._loader = loader
        self._on_change = on_change
        self._adapters: dict[int, Adapter] = {}
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sie-loader")
        for slot in range(len(catalog)):
            control.set_model_state(device_index, slot, ModelState.AVAILABLE)

    def get(self, slot: int) -> Adapter | None:
        with self._lock:
            return self._adapters.get(slot)

    def state(self, slot: int) -> ModelState:
        return self.control.model_state(self.device_index, slot)

    def request_load(self, slot: int) -> None:
        """Start loading a model unless it is loaded, loading, or failed (failures are sticky)."""
        if not 0 <= slot < len(self.catalog) or self.state(slot) != ModelState.AVAILABLE:
            return
        self.control.set_model_state(self.device_index, slot, ModelState.LOADING)
        self._executor.submit(self._load, slot)

    def _load(self, slot: int) -> None:
        config = self.catalog.models[slot]
        started = time.monotonic()
        try:
            adapter = self._loader(config, resolve_weights_dir(config), self.device)
        except Exception as exc:  # any failure to load is reported, never fatal to the device
            message = f"{type(exc).__name__}: {exc}"
            log.error("model load failed", extra={"model": config.sie_id, "error": message})
            self.control.set_model_state(self.device_index, slot, ModelState.FAILED, message)
            self._on_change()
            return
        with self._lock:
            self._adapters[slot] = adapter
        self.control.set_model_memory(self.device_index, slot, adapter.memory_bytes())
        self.control.touch_model(self.device_index, slot)
        self.control.set_model_state(self.device_index, slot, ModelState.LOADED)
        log.info(
            "model loaded",
            extra={"model": config.sie_id, "load_s": round(time.monotonic() - started, 2)},
        )
        self._on_change()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            adapters, self._adapters = list(self._adapters.values()), {}
        for adapter in adapters:
            adapter.close()
