"""The catalog the supervisor read, handed to every child in an anonymous memory file.

Each child used to read the models directory itself and number models by sorted position, so a
directory edited before a child restarted made the wrong model answer. Now the supervisor reads it
once and writes the models, in slot order, as JSON into a `memfd` that every child inherits: a
restarted child reads the very same bytes. (argv would cap a catalog at 128 KiB; a file has no cap.)
"""

from __future__ import annotations

import os

import msgspec

from sie.model_config import Catalog, ModelConfig, UnsupportedModel


class _Shared(msgspec.Struct):
    models: list[ModelConfig]
    unsupported: list[UnsupportedModel]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(_Shared)


def share_catalog(catalog: Catalog) -> int:
    """A memfd holding the catalog (close-on-exec; pass it to children with `pass_fds`)."""
    fd = os.memfd_create("sie-catalog", os.MFD_CLOEXEC)
    data = _ENCODER.encode(_Shared(catalog.models, list(catalog.unsupported.values())))
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], written)
    return fd


def read_shared_catalog(fd: int) -> Catalog:
    """The catalog in an inherited memfd, in the supervisor's order (pread: the offset is shared)."""
    size = os.fstat(fd).st_size
    data = b""
    while len(data) < size:
        chunk = os.pread(fd, size - len(data), len(data))
        if not chunk:
            break
        data += chunk
    shared = _DECODER.decode(data)
    return Catalog(shared.models, keep_order=True, unsupported=shared.unsupported)
