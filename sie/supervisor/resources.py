"""Every shared-memory object of one server: created, replaced on restarts, removed at exit.

The supervisor is the only creator. A restarted process always gets fresh objects under a new
generation and the old names are unlinked at once (mappings already open stay valid), so no one
can resume a ring a dead peer left half-consumed.
"""

from __future__ import annotations

import logging

from sie.metrics.block import StatsBlock
from sie.metrics.recorders import SupervisorRecorder
from sie.settings import Settings
from sie.shm.control import ControlBlock, DeviceState
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.names import Namespace, remove_namespace
from sie.shm.ring import Ring

log = logging.getLogger(__name__)


class SharedResources:
    def __init__(
        self, namespace: Namespace, settings: Settings, n_devices: int, n_frontends: int, n_models: int
    ):
        self.namespace = namespace
        self.settings = settings
        self.n_devices = n_devices
        self.n_frontends = n_frontends
        self.control = ControlBlock.create(namespace.control(), n_devices, n_frontends, n_models)
        self.stats = StatsBlock.create(namespace.stats(), n_devices, n_frontends, n_models)
        self.stats_writer = SupervisorRecorder(self.stats)
        self.stats_writer.ring_capacity(settings.request_ring_bytes, settings.response_ring_bytes)
        self.eventfds = [EventFd.create() for _ in range(n_frontends)]
        self._rings: dict[tuple[int, int], tuple[Ring, Ring]] = {}
        self._doorbells: dict[int, Doorbell] = {}
        for device in range(n_devices):
            self.renew_device(device)

    def renew_device(self, device: int) -> None:
        """Fresh doorbell and rings for a device about to (re)start; frontends fail its old requests."""
        self.control.set_device_state(device, DeviceState.DOWN)
        generation = self.control.bump_device_generation(device)
        old = self._doorbells.get(device)
        self._doorbells[device] = Doorbell.create(self.namespace.doorbell(device, generation))
        if old is not None:
            old.close()
            old.unlink()
        for frontend in range(self.n_frontends):
            self._renew_pair(device, frontend)
        self.wake_frontends()

    def renew_frontend(self, frontend: int) -> None:
        for device in range(self.n_devices):
            self._renew_pair(device, frontend)

    def _renew_pair(self, device: int, frontend: int) -> None:
        generation = self.control.pair_generation(device, frontend) + 1
        name = self.namespace.ring
        fresh = (
            Ring.create(
                name(device, frontend, generation, "req"),
                slots=self.settings.ring_slots,
                arena_bytes=self.settings.request_ring_bytes,
            ),
            Ring.create(
                name(device, frontend, generation, "resp"),
                slots=self.settings.ring_slots,
                arena_bytes=self.settings.response_ring_bytes,
            ),
        )
        old = self._rings.get((device, frontend))
        self._rings[(device, frontend)] = fresh
        self.control.set_pair_generation(device, frontend, generation)
        if old is not None:
            for ring in old:
                ring.close()
                ring.unlink()

    def wake_frontends(self) -> None:
        for wake in self.eventfds:
            wake.ring()

    def publish_stats(self, pids: tuple[list[int], list[int]], restarts: tuple[list[int], list[int]]) -> None:
        """Children's pids and restart counts, and how full every ring is, for /metrics."""
        writer = self.stats_writer
        writer.processes(self.namespace.supervisor_pid, *pids, *restarts)
        for (device, frontend), rings in self._rings.items():
            for direction, ring in enumerate(rings):
                writer.ring(device, frontend, direction, ring.used_bytes(), ring.pending())

    def eventfd_numbers(self) -> list[int]:
        return [wake.fd for wake in self.eventfds]

    def close(self) -> None:
        for pair in self._rings.values():
            for ring in pair:
                ring.close()
                ring.unlink()
        for bell in self._doorbells.values():
            bell.close()
            bell.unlink()
        self.control.close()
        self.control.unlink()
        self.stats.close()
        self.stats.unlink()
        for wake in self.eventfds:
            wake.close()
        leftovers = remove_namespace(self.namespace)
        if leftovers:
            log.warning("removed leftover shared memory", extra={"names": leftovers})
