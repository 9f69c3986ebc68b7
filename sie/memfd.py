"""Whole-file reads and writes of a memfd shared with child processes.

pread/pwrite, never read/write: the file offset is shared by every process holding the descriptor,
so a child's read would move another's.
"""

from __future__ import annotations

import os


def write_all(fd: int, data: bytes) -> None:
    """The file's contents become `data` (written whole, then cut to its length)."""
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], written)
    os.ftruncate(fd, len(data))


def read_all(fd: int) -> bytes:
    """The file's contents as they are now."""
    size = os.fstat(fd).st_size
    data = b""
    while len(data) < size:
        chunk = os.pread(fd, size - len(data), len(data))
        if not chunk:
            break
        data += chunk
    return data
