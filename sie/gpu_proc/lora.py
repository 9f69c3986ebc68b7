"""LoRA adapters of one loaded model: loaded with PEFT on first use, least recently used dropped.

PEFT injects its LoRA layers into the model's own modules, in place, so every adapter family (and
the packed forward, which calls those modules) runs them without knowing. One adapter is active
per batch: batches never mix adapters (their config key differs), and a batch without one runs
with the LoRA layers disabled, which is exactly the base model. Loading mutates the module tree,
so it and each forward take the same lock; loads are rare and short (megabytes of weights). For
the same reason such a model never replays CUDA graphs: a graph would keep the layers it recorded.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from sie.gpu_proc.adapters.cuda_graphs import keep_off_graphs

log = logging.getLogger(__name__)


class LoraMissing(Exception):
    """The batch names an adapter that is not loaded (it was dropped since the batch was admitted)."""


class LoraSet:
    def __init__(self, module: Any, paths: dict[str, str], capacity: int) -> None:
        self.module = module
        keep_off_graphs(module)
        self.names = sorted(paths)  # index i + 1 on the wire (sie.shm.layout.lora_of) is names[i]
        self._paths = paths
        self._capacity = capacity
        self._peft: Any = None
        self._last_used: dict[str, float] = {}  # loaded adapters only
        self._failed: dict[str, tuple[float, str]] = {}  # name -> (monotonic s, error)
        self._loading: set[str] = set()
        self._lock = threading.Lock()

    def name_of(self, index: int) -> str | None:
        return self.names[index - 1] if 0 < index <= len(self.names) else None

    def is_loaded(self, name: str) -> bool:
        return name in self._last_used

    def failure(self, name: str, cooldown_s: float) -> str | None:
        """The load error of `name` while its cool-down lasts, else None."""
        failed = self._failed.get(name)
        if failed is None or time.monotonic() - failed[0] >= cooldown_s:
            return None
        return failed[1]

    def begin_load(self, name: str) -> bool:
        """Claim the load of `name` (False: loaded or already being loaded)."""
        if name in self._loading or self.is_loaded(name):
            return False
        self._loading.add(name)
        return True

    def load(self, name: str) -> None:
        """Load `name` (loader thread), then drop the least recently used beyond capacity."""
        try:
            with self._lock:
                self._inject(name)
                self._last_used[name] = time.monotonic()
                self._failed.pop(name, None)
                while len(self._last_used) > self._capacity:
                    self._drop(min(self._last_used, key=self._last_used.__getitem__))
        except Exception as exc:  # a bad adapter fails its requests, never the model or the device
            message = f"{type(exc).__name__}: {exc}"
            log.error("LoRA adapter load failed", extra={"lora": name, "error": message})
            self._failed[name] = (time.monotonic(), message)
        finally:
            self._loading.discard(name)

    @contextlib.contextmanager
    def applied(self, name: str | None) -> Iterator[None]:
        """Run the body with `name` active (None: the base model); LoraMissing if it is not loaded."""
        with self._lock:
            if self._peft is not None:
                self._activate(name)
            elif name is not None:
                raise LoraMissing(name)
            yield

    def _activate(self, name: str | None) -> None:
        layers = self._peft.base_model
        if name is None:
            layers.disable_adapter_layers()
            return
        if name not in self._last_used:
            raise LoraMissing(name)
        self._last_used[name] = time.monotonic()
        layers.enable_adapter_layers()
        if layers.active_adapters != [name]:
            layers.set_adapter(name)

    def _inject(self, name: str) -> None:
        # deferred: only servers with LoRA adapters pay for importing peft
        from peft import PeftConfig, PeftModel

        started = time.monotonic()
        path = self._paths[name]
        if self._peft is None:
            # Built in two steps (what PeftModel.from_pretrained does) so that a failed weights load
            # can take its layers back out: they are injected into the served module in place.
            peft = PeftModel(self.module, PeftConfig.from_pretrained(path), adapter_name=name)
            try:
                _load_weights(peft, path, name)
            except BaseException:
                peft.unload()
                raise
            self._peft = peft
        else:
            try:
                _load_weights(self._peft, path, name)
            except BaseException:
                if name in self._peft.peft_config:
                    self._peft.delete_adapter(name)
                raise
        self._peft.to(next(self.module.parameters()).device)
        self._peft.eval()
        log.info("LoRA adapter loaded", extra={"lora": name, "load_s": round(time.monotonic() - started, 2)})

    def _drop(self, name: str) -> None:
        del self._last_used[name]
        self._peft.delete_adapter(name)
        log.info("LoRA adapter unloaded", extra={"lora": name})


def _load_weights(peft: Any, path: str, name: str) -> None:
    """The adapter's tensors into its layers; a file that lacks some is a failed load, not layers left
    at their random initialization."""
    loaded = peft.load_adapter(path, adapter_name=name)
    missing = [key for key in loaded.missing_keys if f".{name}." in key]  # not other adapters' tensors
    if missing:
        raise ValueError(f"its weights lack {len(missing)} of its layers' tensors (e.g. {missing[0]})")
