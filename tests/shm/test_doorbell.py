"""Doorbell and EventFd in one process: rings, timeouts, coalescing, EINTR."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import time
from collections.abc import Callable

import posix_ipc
import pytest

from sie.shm import SHM_DIR, Doorbell, EventFd, RingMissing

Names = Callable[[str], str]


@pytest.fixture
def bell(shm_name: Names) -> Doorbell:
    return Doorbell.create(shm_name("bell"))


def test_wait_times_out_when_not_rung(bell: Doorbell) -> None:
    start = time.monotonic()
    assert not bell.wait(0.05)
    assert 0.04 <= time.monotonic() - start < 5
    assert not bell.wait(0)


def test_one_wake_serves_many_rings(bell: Doorbell) -> None:
    for _ in range(5):
        bell.ring()
    assert bell.wait(0)
    assert not bell.wait(0)


def test_ring_at_the_semaphore_maximum_does_not_raise(shm_name: Names) -> None:
    sem = posix_ipc.Semaphore(shm_name("full"), posix_ipc.O_CREX, mode=0o600, initial_value=2**31 - 1)
    bell = Doorbell.attach(sem.name)
    bell.ring()
    assert bell.wait(0)
    assert 0 < sem.value < 2**31 - 1, "one wait drains a bounded number of posts"
    sem.close()
    bell.close()


def test_attached_handle_rings_the_same_bell(bell: Doorbell) -> None:
    other = Doorbell.attach(bell.name)
    other.ring()
    assert bell.wait(1.0)
    other.close()


def test_wait_survives_signals(bell: Doorbell) -> None:
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 0.01, 0.01)  # EINTR every 10 ms during the wait
    try:
        start = time.monotonic()
        assert not bell.wait(0.1)
        assert time.monotonic() - start >= 0.09
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_mode_unlink_and_idempotence(bell: Doorbell) -> None:
    path = os.path.join(SHM_DIR, "sem." + bell.name[1:])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    bell.unlink()
    bell.unlink()
    assert not os.path.exists(path)
    with pytest.raises(RingMissing):
        Doorbell.attach(bell.name)
    bell.close()


def test_eventfd_ring_and_clear() -> None:
    efd = EventFd.create()
    try:
        assert not efd.clear()
        efd.ring()
        efd.ring()
        assert efd.clear()
        assert not efd.clear()
        assert not os.get_inheritable(efd.fd)  # handed down only through pass_fds
    finally:
        efd.close()
        efd.close()


def test_eventfd_watch_in_the_loop_thread() -> None:
    efd = EventFd.create()

    async def main() -> int:
        loop = asyncio.get_running_loop()
        woke = loop.create_future()
        efd.watch(loop, lambda: woke.set_result(1) if not woke.done() else None)
        loop.call_soon(efd.ring)
        result: int = await asyncio.wait_for(woke, 5)
        efd.unwatch()
        return result

    try:
        assert asyncio.run(main()) == 1
        assert not efd.clear(), "the watcher clears before calling back"
    finally:
        efd.close()
