"""Which models this device holds: loading on first use, unloading, and who is using what.

Lifecycle of one model on one device, published in the control block where frontends read it:
`available -> loading -> loaded -> unloading -> available`, or `loading -> failed`. A failed model
answers 502 for `failure_cooldown_s`; then the next request may load it again.

Loads and unloads run on one loader thread, so a slow load never delays batches of another model
and the loop keeps beating. A batch holds a *lease* on its model while it runs: a leased model is
never unloaded under it, and a model being unloaded hands out no more leases.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sie.catalog import Catalog
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.lora import LoraMissing, LoraSet
from sie.gpu_proc.weights import local_weights
from sie.model_config import ModelConfig
from sie.model_location import resolve_weights_dir
from sie.shm.control import ControlBlock, ModelState
from sie.shm.layout import Status

log = logging.getLogger(__name__)

AdapterLoader = Callable[[ModelConfig, Path, str], Adapter]
# Files whose size predicts a model's memory before it is loaded (the largest format present wins).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".onnx", ".pt")


class Registry:
    def __init__(
        self,
        catalog: Catalog,
        control: ControlBlock,
        device_index: int,
        device: str,
        loader: AdapterLoader,
        on_change: Callable[[], None] = lambda: None,
        *,
        failure_cooldown_s: float = 60.0,
        release: Callable[[], None] = lambda: None,
        max_loras: int = 10,
        loader_thread_setup: Callable[[], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.control = control
        self.device_index = device_index
        self.device = device
        self.failure_cooldown_s = failure_cooldown_s
        self.max_loras = max_loras
        self._loader = loader
        self._on_change = on_change
        self._release = release  # give freed memory back (allocator caches) after an unload
        # Called on the loader thread right before a load: the memory manager makes room there.
        self.before_load: Callable[[int], None] = lambda slot: None
        # The model's weights folder for a load (sie.gpu_proc.weights: a cluster cache copies it first).
        self.weights: Callable[[ModelConfig], contextlib.AbstractContextManager[Path]] = local_weights
        self.on_unload: Callable[[int, Adapter], None] = lambda slot, adapter: None
        self._adapters: dict[int, Adapter] = {}
        self._loras: dict[int, LoraSet] = {}
        self._leases: dict[int, int] = {}
        self._last_used: dict[int, float] = {}
        self._known_bytes: dict[int, int] = {}
        self._unloaded: deque[int] = deque()
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="sie-loader", initializer=loader_thread_setup
        )
        for slot in range(len(catalog)):
            control.set_model_state(device_index, slot, ModelState.AVAILABLE)

    # -- reading -----------------------------------------------------------------------------------
    def get(self, slot: int) -> Adapter | None:
        with self._lock:
            return self._adapters.get(slot)

    def state(self, slot: int) -> ModelState:
        return self.control.model_state(self.device_index, slot)

    def loaded_slots(self) -> list[int]:
        with self._lock:
            return list(self._adapters)

    def last_used(self, slot: int) -> float:
        """Monotonic seconds of the model's last batch (or its load)."""
        return self._last_used.get(slot, 0.0)

    def held_bytes(self) -> int:
        """Bytes this device's models hold (parameters and buffers, as each load measured them),
        counted until an unload has freed them."""
        return int(self.control.models["memory_bytes"][self.device_index].sum())

    def is_leased(self, slot: int) -> bool:
        return self._leases.get(slot, 0) > 0

    def expected_bytes(self, slot: int) -> int:
        """Memory the model will take: what it took last time, else the size of its weight files."""
        known = self._known_bytes.get(slot)
        if known is None:
            known = self._known_bytes[slot] = weight_file_bytes(self.catalog.models[slot])
        return known

    # -- using ---------------------------------------------------------------------------------------
    def touch(self, slot: int) -> None:
        """The model was used now: it moves to the back of the eviction order."""
        self._last_used[slot] = time.monotonic()
        self.control.touch_model(self.device_index, slot)

    @contextlib.contextmanager
    def lease(self, slot: int) -> Iterator[Adapter | None]:
        """The model's adapter for one batch (None if it is not loaded); no unload while held."""
        with self._lock:
            adapter = self._adapters.get(slot)
            if adapter is not None:
                self._leases[slot] = self._leases.get(slot, 0) + 1
        if adapter is None:
            yield None
            return
        self.touch(slot)
        try:
            yield adapter
        finally:
            with self._lock:
                self._leases[slot] -= 1

    # -- loading -------------------------------------------------------------------------------------
    def request_load(self, slot: int) -> bool:
        """Start loading unless loaded, busy, or failed within the cool-down; True if it started."""
        if not 0 <= slot < len(self.catalog) or not self.can_load(slot):
            return False
        self.control.set_model_state(self.device_index, slot, ModelState.LOADING)
        self._executor.submit(self._load, slot)
        return True

    def on_loader(self, work: Callable[[], None]) -> None:
        """Run `work` on the loader thread, in turn with loads (connecting to a cluster cache)."""
        self._executor.submit(work)

    def can_load(self, slot: int) -> bool:
        state = self.state(slot)
        if state == ModelState.FAILED:
            age_s = (time.monotonic_ns() - self.control.model_state_ns(self.device_index, slot)) / 1e9
            return age_s >= self.failure_cooldown_s
        return state == ModelState.AVAILABLE

    def _load(self, slot: int) -> None:
        config = self.catalog.models[slot]
        started = time.monotonic()
        try:
            with self.weights(config) as weights:  # held until the adapter has read them
                self.before_load(slot)  # after the weights are here: their size is the model's
                adapter = self._loader(config, weights, self.device)
        except Exception as exc:  # any failure to load is reported, never fatal to the device
            message = f"{type(exc).__name__}: {exc}"
            log.error("model load failed", extra={"model": config.sie_id, "error": message})
            self._release()  # a half-built model (an OOM part way) leaves memory to give back
            self.control.set_model_state(self.device_index, slot, ModelState.FAILED, message)
            self._on_change()
            return
        memory = adapter.memory_bytes()
        self._known_bytes[slot] = max(memory, self._known_bytes.get(slot, 0))
        self.touch(slot)
        with self._lock:
            self._adapters[slot] = adapter
            if config.loras and (module := adapter.lora_target()) is not None:
                self._loras[slot] = LoraSet(module, config.loras, self.max_loras)
        self.control.set_model_memory(self.device_index, slot, memory)
        self.control.set_model_state(self.device_index, slot, ModelState.LOADED)
        log.info(
            "model loaded",
            extra={"model": config.sie_id, "load_s": round(time.monotonic() - started, 2)},
        )
        self._on_change()

    # -- LoRA adapters -------------------------------------------------------------------------------
    def check_lora(self, slot: int, index: int) -> tuple[Status, str] | None:
        """None when the adapter is ready for a batch; else why not (its load starts if it can)."""
        loras = self._loras.get(slot)
        name = loras.name_of(index) if loras is not None else None
        if loras is None or name is None:
            return Status.INVALID, "this model has no such LoRA adapter (or its family takes none)"
        if loras.is_loaded(name):
            return None
        if (error := loras.failure(name, self.failure_cooldown_s)) is not None:
            return Status.LORA_FAILED, f"LoRA adapter '{name}' failed to load: {error}"
        if loras.begin_load(name):
            self._executor.submit(self._load_lora, loras, name)
        return Status.LORA_LOADING, f"LoRA adapter '{name}' is loading"

    def _load_lora(self, loras: LoraSet, name: str) -> None:
        loras.load(name)
        self._on_change()

    @contextlib.contextmanager
    def lora_applied(self, slot: int, index: int) -> Iterator[None]:
        """The body runs with the batch's adapter active (index 0: none). LoraMissing if dropped."""
        loras = self._loras.get(slot)
        if loras is None:
            if index:
                raise LoraMissing(str(index))
            yield
            return
        with loras.applied(loras.name_of(index) if index else None):
            yield

    # -- unloading -----------------------------------------------------------------------------------
    def try_unload(self, slot: int, *, wait: bool = False) -> bool:
        """Unload a loaded model no batch is running on; False if it is not loaded or is leased.

        `wait`: free the memory on this thread before returning (the loader and inference threads
        do, since they need the room now); else on the loader thread, and the loop keeps beating.
        """
        with self._lock:
            adapter = self._adapters.get(slot)
            if adapter is None or self._leases.get(slot, 0):
                return False
            del self._adapters[slot]
            self._loras.pop(slot, None)
            self.control.set_model_state(self.device_index, slot, ModelState.UNLOADING)
        self._unloaded.append(slot)
        log.info("unloading model", extra={"model": self.catalog.models[slot].sie_id})
        if wait:
            self._close(slot, adapter)
        else:
            self._executor.submit(self._close, slot, adapter)
        self._on_change()
        return True

    def take_unloaded(self) -> list[int]:
        """Slots whose unload began since the last call: the loop answers their queued items."""
        taken: list[int] = []
        while self._unloaded:
            taken.append(self._unloaded.popleft())
        return taken

    def _close(self, slot: int, adapter: Adapter) -> None:
        self.on_unload(slot, adapter)
        adapter.close()
        del adapter
        self._release()
        self.control.set_model_memory(self.device_index, slot, 0)
        self.control.set_model_state(self.device_index, slot, ModelState.AVAILABLE)
        self._on_change()

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            adapters, self._adapters = list(self._adapters.values()), {}
        for adapter in adapters:
            adapter.close()


def weight_file_bytes(config: ModelConfig) -> int:
    """Bytes of the weight files of the largest format in the model's folder (0 if unknown); a
    weightless model's declared footprint."""
    if config.is_weightless:
        return int(config.profile().adapter_options.loadtime.get("memory_footprint_bytes", 0))
    try:
        folder = resolve_weights_dir(config)
    except Exception:
        return 0
    sizes = {suffix: 0 for suffix in WEIGHT_SUFFIXES}
    for path in folder.rglob("*"):
        if path.suffix in sizes and path.is_file():
            sizes[path.suffix] += path.stat().st_size
    # A folder may hold the same weights in two formats; only one of them is loaded.
    return max(sizes.values())
