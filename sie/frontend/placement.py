"""Where a model should load: the least loaded device by memory, and a second one when busy.

Pure reads of the control block, so every frontend that asks gets the same answer from the same
numbers (two frontends placing the same model at once pick the same device, and the device loads
it once). A device whose load of the model failed is skipped until the cool-down has passed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from sie.shm.control import ControlBlock, ModelState


def loadable_devices(control: ControlBlock, up: list[int], slot: int, cooldown_s: float) -> list[int]:
    """Up devices that could start loading `slot` now."""
    now_ns = time.monotonic_ns()

    def may_load(device: int) -> bool:
        state = control.model_state(device, slot)
        if state == ModelState.FAILED:
            return now_ns - control.model_state_ns(device, slot) >= cooldown_s * 1e9
        return state == ModelState.AVAILABLE

    return [device for device in up if may_load(device)]


# Shares of memory this close count as equal: two devices' readings are taken at different moments,
# and on CPU devices a process's resident set moves by more than a small model between two.
SHARE_TOLERANCE = 0.02


def least_loaded(control: ControlBlock, devices: list[int]) -> int:
    """The device using the smallest share of its memory (as the devices measured it); among those
    within SHARE_TOLERANCE of it, the one holding fewest models. A share, not free bytes: CPU
    devices all see the same free system memory, while their own use tells them apart; for GPUs of
    one size the two orders agree."""

    def share(device: int) -> float:
        used, capacity = control.device_memory(device)
        return used / capacity if capacity else 0.0

    def held(device: int) -> int:
        return int(np.count_nonzero(control.models["state"][device] != ModelState.AVAILABLE))

    shares = {device: share(device) for device in devices}
    lowest = min(shares.values())
    close = [device for device in devices if shares[device] <= lowest + SHARE_TOLERANCE]
    return min(close, key=lambda device: (held(device), shares[device]))


@dataclass(slots=True)
class ReplicaWatch:
    """Notices models whose every replica has stayed `queue_depth` deep for `after_s` seconds."""

    queue_depth: int
    after_s: float
    deep_since: dict[int, float] = field(default_factory=dict)

    def deep_models(self, control: ControlBlock, up: list[int], now: float) -> list[int]:
        """Slots due for another replica now (each is reported once per `after_s`)."""
        if self.queue_depth <= 0 or len(up) < 2:
            return []
        depths = control.models["queue_depth"]
        states = control.models["state"]
        due = []
        for slot in range(depths.shape[1]):
            holders = [d for d in up if states[d, slot] == ModelState.LOADED]
            shallow = not holders or min(int(depths[d, slot]) for d in holders) < self.queue_depth
            if shallow or len(holders) == len(up):
                self.deep_since.pop(slot, None)
                continue
            since = self.deep_since.setdefault(slot, now)
            if now - since >= self.after_s:
                due.append(slot)
                self.deep_since[slot] = now  # wait again before asking for a third
        return due
