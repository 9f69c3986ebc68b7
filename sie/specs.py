"""What the supervisor tells each child process, encoded as JSON on the child's argv."""

from __future__ import annotations

import msgspec


class DeviceSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    index: int
    device: str  # "cpu" or "cuda:N"
    instance: str
    supervisor_pid: int
    eventfds: list[int]  # one per frontend, inherited; the device rings them when results are ready
    preload_slots: list[int]
    catalog_fd: int  # the supervisor's catalog (sie.shared_catalog), inherited


class FrontendSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    index: int
    instance: str
    supervisor_pid: int
    eventfd: int  # this frontend's wakeup, inherited
    listen_fd: int  # the shared listening socket, inherited
    catalog_fd: int  # the supervisor's catalog (sie.shared_catalog), inherited
    device_names: list[str] = []  # "cpu" or "cuda:N" per device index, for /v1/models
    auth_fd: int = -1  # the bearer tokens (sie.bearer_tokens), inherited; -1: no authentication
