"""Freed heap memory goes back to the system at idle moments, at most every EVERY_S."""

from __future__ import annotations

import ctypes

import pytest

from sie.heap import HeapTrimmer, glibc


def anonymous_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


def test_trims_only_after_work_and_not_more_often_than_asked() -> None:
    trimmer = HeapTrimmer(every_s=5.0)
    assert not trimmer.idle(100.0)  # nothing worked yet
    trimmer.busy()
    assert trimmer.idle(100.0) and trimmer.trims == 1
    trimmer.busy()
    assert not trimmer.idle(103.0)  # too soon after the last trim
    assert trimmer.idle(105.0) and trimmer.trims == 2
    assert not trimmer.idle(200.0)  # no work since


@pytest.mark.skipif(glibc() is None, reason="malloc_trim is glibc's")
def test_a_trim_gives_freed_heap_pages_back() -> None:
    libc = glibc()
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD: these blocks come from the heap, as after a burst
    try:
        blocks = [libc.malloc(64 * 1024) for _ in range(2049)]  # 128 MiB, touched below
        pin = blocks.pop()  # the last, above the others: free() alone cannot shrink the heap past it
        for block in blocks:
            ctypes.memset(block, 1, 64 * 1024)
        for block in blocks:
            libc.free(block)
        held = anonymous_kib()
        assert held > 128 * 1024  # still mapped: the high-water mark a burst leaves
        trimmer = HeapTrimmer(every_s=0.0)
        trimmer.busy()
        assert trimmer.idle(0.0)
        assert anonymous_kib() < held - 64 * 1024  # most of the 128 MiB is back with the system
        libc.free(pin)
    finally:
        libc.mallopt(-3, 128 * 1024)
