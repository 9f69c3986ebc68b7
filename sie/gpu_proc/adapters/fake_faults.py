"""The fake model's injected faults: SIE's `faults` switches, each taking the real code path.

A fault comes from the profile's `adapter_options.loadtime.faults`, with `SIE_FAKE_FAULTS` (a JSON
object keyed by the profile's `fault_key`) merged over it at load, as SIE reads them. A slow or
latched load holds the real loading window; an out-of-memory forward is a real allocation the
device's allocator refuses, so recovery sees exactly what a model too big for its batch raises.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

FAULTS_ENV = "SIE_FAKE_FAULTS"
LATCH_POLL_S = 0.01
# More bytes than any device has: the allocator refuses it at once, without touching memory.
IMPOSSIBLE_BYTES = 1 << 60


@dataclass(frozen=True, slots=True)
class FakeFaults:
    oom_on_dispatch: int | None = None  # 1-based forward on which allocation fails
    oom_repeat: int = 1  # that many forwards in a row fail from there
    oom_typed: bool = False  # SIE's typed error; here every injected OOM is the allocator's own
    # Ours: a forward over more than this many tokens fails to allocate, as activations that grow
    # with the batch would; recovery halves it until only items longer than this are refused.
    oom_over_tokens: int | None = None
    slow_load_s: float = 0.0
    fail_load: bool = False
    teardown_hang_s: float = 0.0
    load_latch_file: str | None = None  # the load waits until this file exists
    dispatch_latch_file: str | None = None  # every forward waits until this file exists
    latch_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.oom_on_dispatch is not None and self.oom_on_dispatch < 1:
            raise ValueError(f"oom_on_dispatch must be >= 1, got {self.oom_on_dispatch}")
        if self.oom_repeat < 1:
            raise ValueError(f"oom_repeat must be >= 1, got {self.oom_repeat}")
        if self.oom_over_tokens is not None and self.oom_over_tokens < 0:
            raise ValueError(f"oom_over_tokens must be >= 0, got {self.oom_over_tokens}")
        for name in ("slow_load_s", "teardown_hang_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        if not math.isfinite(self.latch_timeout_s) or self.latch_timeout_s <= 0:
            raise ValueError(f"latch_timeout_s must be a finite number > 0, got {self.latch_timeout_s}")


FAULT_NAMES = frozenset(f.name for f in fields(FakeFaults))


def resolve_faults(declared: dict[str, Any] | None, fault_key: str | None) -> FakeFaults:
    """The YAML's faults with the environment's override for `fault_key` merged over them."""
    merged: dict[str, Any] = dict(declared or {})
    raw = os.environ.get(FAULTS_ENV)
    if raw and fault_key is not None:
        try:
            by_key = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid {FAULTS_ENV} JSON: {exc}") from None
        if not isinstance(by_key, dict):
            raise ValueError(f"{FAULTS_ENV} must be a JSON object keyed by fault_key")
        override = by_key.get(fault_key)
        if override is not None and not isinstance(override, dict):
            raise ValueError(f"{FAULTS_ENV}[{fault_key!r}] must be a JSON object")
        merged.update(override or {})
    unknown = sorted(set(merged) - FAULT_NAMES)
    if unknown:
        raise ValueError(f"unknown fake fault option(s) for {fault_key!r}: {', '.join(unknown)}")
    return FakeFaults(**merged)


class FaultRuntime:
    """One loaded instance's fault state: the forward counter and the hooks around load and forward."""

    def __init__(self, faults: FakeFaults, device: torch.device) -> None:
        self.faults = faults
        self.device = device
        self.dispatches = 0

    def on_load(self) -> None:
        if self.faults.fail_load:
            raise RuntimeError("sie-fake injected load failure")
        if self.faults.slow_load_s > 0:
            time.sleep(self.faults.slow_load_s)
        if self.faults.load_latch_file is not None:
            _wait_for(self.faults.load_latch_file, self.faults.latch_timeout_s, "load")

    def on_forward(self, n_tokens: int) -> None:
        """Before a forward of `n_tokens`: wait on its latch, then fail to allocate where told to."""
        faults = self.faults
        if faults.dispatch_latch_file is not None:
            _wait_for(faults.dispatch_latch_file, faults.latch_timeout_s, "dispatch")
        self.dispatches += 1
        first = faults.oom_on_dispatch
        in_window = first is not None and first <= self.dispatches < first + faults.oom_repeat
        if in_window or (faults.oom_over_tokens is not None and n_tokens > faults.oom_over_tokens):
            torch.empty(IMPOSSIBLE_BYTES, dtype=torch.uint8, device=self.device)

    def on_unload(self) -> None:
        if self.faults.teardown_hang_s > 0:
            time.sleep(self.faults.teardown_hang_s)


def _wait_for(latch_file: str, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    path = Path(latch_file)
    while not path.exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"sie-fake {what} latch '{latch_file}' not released within {timeout_s}s")
        time.sleep(LATCH_POLL_S)
