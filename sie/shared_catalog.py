"""The catalog the supervisor read, handed to every child in an anonymous memory file.

The supervisor reads the models directory and writes the models, in slot order, as JSON into a
`memfd` that every child inherits, so a restarted child reads the very same bytes (argv would cap
a catalog at 128 KiB; a file has no cap). When the directory changes the supervisor rewrites the
file in place and then bumps the catalog generation in the control block; a child that sees a new
generation re-reads the file, and retries while the file's own generation is not the one announced
(a read that overlapped a later rewrite).
"""

from __future__ import annotations

import os
import time

import msgspec

from sie.catalog import Catalog, UnsupportedModel
from sie.memfd import read_all, write_all
from sie.model_config import ModelConfig
from sie.shm.control import ControlBlock


class _Shared(msgspec.Struct):
    generation: int
    models: list[ModelConfig]
    active: list[int]
    unsupported: list[UnsupportedModel]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Shared)


def share_catalog(catalog: Catalog) -> int:
    """A memfd holding the catalog (close-on-exec; pass it to children with `pass_fds`)."""
    fd = os.memfd_create("sie-catalog", os.MFD_CLOEXEC)
    write_catalog(fd, catalog, 0)
    return fd


def write_catalog(fd: int, catalog: Catalog, generation: int) -> None:
    shared = _Shared(generation, catalog.models, catalog.active_slots(), list(catalog.unsupported.values()))
    write_all(fd, _ENCODER.encode(shared))


def read_shared_catalog(fd: int) -> Catalog:
    """The catalog in an inherited memfd, in the supervisor's order."""
    return read_generation(fd, 0)[0]


def read_generation(fd: int, at_least: int) -> tuple[Catalog, int]:
    """The catalog once the file holds generation `at_least` or later, and the generation it holds."""
    for _ in range(2000):
        shared = _read(fd)
        if shared is not None and shared.generation >= at_least:
            catalog = Catalog(
                shared.models, keep_order=True, unsupported=shared.unsupported, active=shared.active
            )
            return catalog, shared.generation
        time.sleep(0.001)
    raise RuntimeError(f"the shared catalog never reached generation {at_least}")


def _read(fd: int) -> _Shared | None:
    """One read of the file."""
    data = read_all(fd)
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError:
        return None  # read while being rewritten: the caller reads again


class CatalogFeed:
    """A child's view of the live catalog: `changed()` returns the new catalog once per change."""

    def __init__(self, fd: int, control: ControlBlock) -> None:
        self._fd = fd
        self._control = control
        self.catalog, self.generation = read_generation(fd, control.catalog_generation())

    def changed(self) -> Catalog | None:
        announced = self._control.catalog_generation()
        if announced <= self.generation:
            return None
        self.catalog, self.generation = read_generation(self._fd, announced)
        return self.catalog
