"""Fixtures for shm tests: unique names per test, removed afterwards whatever the test did."""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import pytest

from sie.shm.names import SHM_DIR


def _remove_stem(stem: str) -> None:
    for entry in os.listdir(SHM_DIR):
        if entry.startswith(stem) or entry.startswith("sem." + stem):
            with suppress(FileNotFoundError):
                os.unlink(os.path.join(SHM_DIR, entry))


@pytest.fixture
def shm_name() -> Iterator[Callable[[str], str]]:
    """Make posix_ipc names unique to this test (pid + uuid); remove them all at teardown."""
    stem = f"sietest.{os.getpid()}.{uuid.uuid4().hex[:12]}"

    def make(suffix: str = "ring") -> str:
        return f"/{stem}.{suffix}"

    yield make
    _remove_stem(stem)


@contextmanager
def raw_words(name: str) -> Iterator[memoryview]:
    """A whole segment as int64 words, mapped independently of any Ring object."""
    with open(os.path.join(SHM_DIR, name.lstrip("/")), "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
    buf = memoryview(mm)
    words = buf.cast("q")
    try:
        yield words
    finally:
        words.release()
        buf.release()
        mm.close()
