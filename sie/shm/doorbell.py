"""Wakeups that tell the other side to look at its rings; they never carry data.

Device side: one named counting semaphore per device, posted by every producer after a push.
Frontend side: one eventfd per frontend, watched by the asyncio loop with add_reader, so futures
are resolved in the loop thread with no waiter thread and no GIL hand-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import Callable

import posix_ipc

from sie.shm.ring import RingMissing

# posix_ipc turns a timeout into an absolute CLOCK_REALTIME deadline, so a wall-clock step can
# stretch one wait; short waits against a monotonic deadline bound the damage.
_MAX_WAIT_S = 0.25
# Producers post on every push, also while the device is busy and not waiting, so the count can
# grow large; draining in bounded steps keeps one wait short (a leftover count only means the
# next wait returns at once).
_MAX_DRAIN = 4096


class Doorbell:
    """A named counting semaphore: producers post, one device loop waits and coalesces."""

    def __init__(self, name: str, sem: posix_ipc.Semaphore) -> None:
        self.name = name
        self._sem = sem

    @classmethod
    def create(cls, name: str) -> Doorbell:
        return cls(name, posix_ipc.Semaphore(name, posix_ipc.O_CREX, mode=0o600, initial_value=0))

    @classmethod
    def attach(cls, name: str) -> Doorbell:
        """Open an existing doorbell; RingMissing (as for rings) if its device generation is gone."""
        try:
            return cls(name, posix_ipc.Semaphore(name))
        except posix_ipc.ExistentialError as exc:
            raise RingMissing(f"no doorbell named {name}") from exc

    def ring(self) -> None:
        try:
            self._sem.release()
        except OSError as exc:
            if exc.errno != errno.EOVERFLOW:
                raise
            # SEM_VALUE_MAX posts are pending: the waiter has plenty of wakeups to come.

    def wait(self, timeout_s: float) -> bool:
        """Block up to `timeout_s`; True if rung. Extra posts are drained: one wake serves many.

        Callers scan their rings after this returns. A post that lands after the drain leaves the
        count above zero, so the next wait returns at once and no wakeup is lost.
        """
        sem = self._sem
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                sem.acquire(min(remaining, _MAX_WAIT_S) if remaining > 0 else 0)
                break
            except posix_ipc.BusyError:
                if remaining <= 0:
                    return False
            except posix_ipc.SignalError:
                continue  # EINTR is not retried by posix_ipc (no PEP 475)
        self._drain()
        return True

    def _drain(self) -> None:
        sem = self._sem
        for _ in range(_MAX_DRAIN):
            if not sem.value:
                return
            try:
                sem.acquire(0)
            except posix_ipc.BusyError:
                return

    def close(self) -> None:
        self._sem.close()

    def unlink(self) -> None:
        with contextlib.suppress(posix_ipc.ExistentialError):
            posix_ipc.unlink_semaphore(self.name)


class EventFd:
    """A non-blocking eventfd; the supervisor makes it and passes it to children (pass_fds)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)  # O_NONBLOCK is shared with the fd's other copies anyway
        self.fd = fd
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def create(cls) -> EventFd:
        # CLOEXEC as for every Python fd (PEP 446): subprocess pass_fds still hands it down.
        return cls(os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC))

    def ring(self) -> None:
        with contextlib.suppress(BlockingIOError):  # counter saturated: it is rung already
            os.eventfd_write(self.fd, 1)

    def clear(self) -> bool:
        """Read and reset the counter; False if it was not set."""
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            return False
        return True

    def watch(self, loop: asyncio.AbstractEventLoop, on_wake: Callable[[], None]) -> None:
        """Call `on_wake` in the loop thread after each ring, clearing first so none is lost."""

        def on_readable() -> None:
            if self.clear():
                on_wake()

        self.unwatch()
        loop.add_reader(self.fd, on_readable)
        self._loop = loop

    def unwatch(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.fd)
            self._loop = None

    def close(self) -> None:
        self.unwatch()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
