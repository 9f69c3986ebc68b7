"""Single-producer single-consumer ring in one POSIX shared-memory segment.

Segment layout (little-endian int64 words; see shm-design.md section 2.3):

    line 0   [0, 64)     magic, LAYOUT_VERSION, nslots, arena_bytes, arena_offset   (creator)
    line 1   [64, 128)   head, data_head, reclaimed, reclaimed_data                  (producer)
    line 2   [128, 192)  tail, data_tail                                             (consumer)
    slots    [192, ...)  nslots x {seq, arena_off, nbytes, tag}                      (producer)
    arena    64-aligned  payload bytes, each payload 64-aligned and never wrapped

Counters only increase; a position is counter % size. Every word has one writer. Memory ordering
comes from two named counting semaphores, not from Python statement order: the producer posts
`<name>.items` once per committed slot and the consumer touches a slot only after a successful
trywait on it; the consumer posts `<name>.free` once per released slot and the producer reuses
arena space only after a successful trywait on it. POSIX makes successful sem operations
synchronize memory, so this holds on weakly ordered CPUs (ARM) too, not only on x86.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from dataclasses import dataclass

import numpy as np
import posix_ipc

from sie.shm.layout import LAYOUT_VERSION

MAGIC = int.from_bytes(b"SIERING1", "little")
ALIGN = 64
HEADER_BYTES = 192
SLOT_WORDS = 4
PAUSE_ENV = "SIE_SHM_TEST_PAUSE_BEFORE_PUBLISH"

# Word indices into the header ("q" cast of the first HEADER_BYTES).
_MAGIC, _VERSION, _NSLOTS, _ARENA_BYTES, _ARENA_OFFSET = 0, 1, 2, 3, 4
_HEAD, _DATA_HEAD, _RECLAIMED, _RECLAIMED_DATA = 8, 9, 10, 11
_TAIL, _DATA_TAIL = 16, 17


class PayloadTooLarge(ValueError):
    """The payload can never fit in this ring, however empty it gets (HTTP 413)."""


class RingCorrupt(RuntimeError):
    """The segment is not a ring of this layout version, or a slot is not the one expected."""


class RingMissing(RuntimeError):
    """No ring of that name exists: its owner is gone or a newer generation replaced it."""


@dataclass(frozen=True, slots=True)
class Message:
    """One popped slot. `view` aliases the arena and is valid until `Ring.release(message)`."""

    tag: int
    view: np.ndarray
    end: int


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def _arena_offset(nslots: int) -> int:
    return _aligned(HEADER_BYTES + nslots * SLOT_WORDS * 8)


class Ring:
    """One direction of a (frontend, device) pair. Use one object per process and side."""

    def __init__(
        self,
        name: str,
        mm: mmap.mmap,
        items: posix_ipc.Semaphore,
        free: posix_ipc.Semaphore,
    ) -> None:
        self.name = name
        nslots, cap, arena_offset = _read_geometry(name, mm)
        self._mm = mm
        self._items, self._free = items, free
        self._nslots, self._cap, self._arena_offset = nslots, cap, arena_offset
        self._buf = memoryview(mm)
        self._header = self._buf[:HEADER_BYTES].cast("q")
        # Unsigned so the tag can be any u64; seq, offsets and sizes are never negative.
        self._slots = self._buf[HEADER_BYTES:arena_offset].cast("Q")
        self._arena = np.frombuffer(mm, np.uint8, cap, arena_offset)
        h = self._header
        # Producer-local copies of its own counters (it is their only writer).
        self._head, self._data_head = h[_HEAD], h[_DATA_HEAD]
        self._reclaimed, self._reclaimed_data = h[_RECLAIMED], h[_RECLAIMED_DATA]
        # Consumer-local: popped runs ahead of released while views are held.
        self._popped = self._released = h[_TAIL]
        self._released_data = h[_DATA_TAIL]
        self._pause_file = os.environ.get(PAUSE_ENV)
        self._closed = False

    @classmethod
    def create(
        cls,
        name: str,
        *,
        slots: int = 256,
        arena_bytes: int = 8 << 20,
        _counter_base: int = 0,
    ) -> Ring:
        """Create segment and semaphores exclusively (mode 0600). `_counter_base` is for tests."""
        if slots < 1 or arena_bytes < 1:
            raise ValueError("a ring needs at least one slot and one arena byte")
        if not 0 <= _counter_base < 1 << 62:
            raise ValueError("counter base must be in [0, 2**62)")
        cap = _aligned(arena_bytes)
        offset = _arena_offset(slots)
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=0o600, size=offset + cap)
        try:
            mm = mmap.mmap(shm.fd, shm.size)
        except BaseException:
            shm.unlink()
            raise
        finally:
            shm.close_fd()
        _init_header(mm, slots, cap, offset, _counter_base)
        created: list[posix_ipc.Semaphore] = []
        try:
            for suffix in (".items", ".free"):
                created.append(posix_ipc.Semaphore(name + suffix, posix_ipc.O_CREX, mode=0o600))
        except BaseException:
            for sem in created:
                sem.unlink()
                sem.close()
            posix_ipc.unlink_shared_memory(name)
            mm.close()
            raise
        return cls(name, mm, created[0], created[1])

    @classmethod
    def attach(cls, name: str) -> Ring:
        """Open an existing ring; RingMissing if it is gone, RingCorrupt if it is not ours."""
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError as exc:
            raise RingMissing(f"no ring named {name}") from exc
        try:
            if shm.size < HEADER_BYTES:
                raise RingCorrupt(f"{name}: segment of {shm.size} bytes is smaller than a ring header")
            mm = mmap.mmap(shm.fd, shm.size)
        finally:
            shm.close_fd()
        sems: list[posix_ipc.Semaphore] = []
        try:
            for suffix in (".items", ".free"):
                sems.append(posix_ipc.Semaphore(name + suffix))
            return cls(name, mm, sems[0], sems[1])
        except posix_ipc.ExistentialError as exc:
            _close_quietly(mm, sems)
            raise RingMissing(f"ring {name} has lost its semaphores") from exc
        except BaseException:
            _close_quietly(mm, sems)
            raise

    @property
    def max_payload_bytes(self) -> int:
        return self._cap

    # -- producer -------------------------------------------------------------------------------

    def try_push(self, payload: np.ndarray | bytes | memoryview, tag: int) -> bool:
        """Copy `payload` into the ring and publish it. False (nothing changed) when full."""
        payload, n = _contiguous(payload)
        alloc = (n + 63) & ~63
        cap = self._cap
        if alloc > cap:
            raise PayloadTooLarge(f"{n}-byte payload never fits in {self.name} ({cap}-byte arena)")
        if self._free.value:
            self._reclaim()
        head, data_head = self._head, self._data_head
        if head - self._reclaimed >= self._nslots:
            return False
        pos = data_head % cap
        reclaimed_data = self._reclaimed_data
        if pos + alloc > cap:
            # Never split a payload: skip the arena tail. An empty arena loses nothing by it.
            if reclaimed_data == data_head:
                reclaimed_data += cap - pos
            data_head += cap - pos
            pos = 0
        if data_head + alloc - reclaimed_data > cap:
            return False
        start = self._arena_offset + pos
        # ndarray exports the buffer protocol; typeshed for 3.11 cannot express that.
        self._mm[start : start + n] = payload  # type: ignore[assignment]
        i = (head % self._nslots) * SLOT_WORDS
        slots = self._slots
        slots[i + 1] = data_head
        slots[i + 2] = n
        slots[i + 3] = tag
        if self._pause_file is not None:
            _pause_forever(self._pause_file)
        slots[i] = head + 1  # commit marker, checked by the consumer as seq == tail + 1
        self._head = head = head + 1
        self._data_head = data_head = data_head + alloc
        h = self._header
        if reclaimed_data != self._reclaimed_data:
            self._reclaimed_data = h[_RECLAIMED_DATA] = reclaimed_data
        h[_DATA_HEAD] = data_head
        h[_HEAD] = head
        self._items.release()  # sem_post: release barrier that publishes everything above
        return True

    def _reclaim(self) -> None:
        """Take back arena space of slots the consumer released (one trywait per slot)."""
        free, slots, nslots = self._free, self._slots, self._nslots
        reclaimed, reclaimed_data = self._reclaimed, self._reclaimed_data
        while free.value:
            free.acquire(0)  # sole decrementer: value > 0 means this succeeds; acquire barrier
            i = (reclaimed % nslots) * SLOT_WORDS
            end = slots[i + 1] + ((slots[i + 2] + 63) & ~63)
            # max(): an empty arena may already have been skipped past this slot's end.
            reclaimed_data = max(reclaimed_data, end)
            reclaimed += 1
        self._reclaimed, self._reclaimed_data = reclaimed, reclaimed_data
        h = self._header
        h[_RECLAIMED_DATA] = reclaimed_data
        h[_RECLAIMED] = reclaimed

    # -- consumer -------------------------------------------------------------------------------

    def try_pop(self) -> Message | None:
        """The oldest published, not yet popped message, or None when there is none."""
        items = self._items
        if not items.value:
            return None
        items.acquire(0)  # sole decrementer: value > 0 means this succeeds; acquire barrier
        tail = self._popped
        i = (tail % self._nslots) * SLOT_WORDS
        seq, off, n, tag = self._slots[i : i + SLOT_WORDS].tolist()
        if seq != tail + 1:
            items.release()  # leave the count for whoever inspects the ring next
            raise RingCorrupt(f"{self.name}: slot {tail % self._nslots} has seq {seq}, expected {tail + 1}")
        pos = off % self._cap
        if n > self._cap - pos:
            items.release()
            raise RingCorrupt(f"{self.name}: slot {tail % self._nslots} runs past the arena end")
        self._popped = tail + 1
        return Message(tag, self._arena[pos : pos + n], off + ((n + 63) & ~63))

    def release(self, message: Message) -> None:
        """Hand the message's arena space back to the producer. Messages go back in pop order."""
        if self._released >= self._popped:
            raise ValueError(f"{self.name}: release without a popped message")
        if message.end < self._released_data:
            raise ValueError(f"{self.name}: messages must be released in the order they were popped")
        self._released += 1
        self._released_data = message.end
        h = self._header
        h[_DATA_TAIL] = message.end
        h[_TAIL] = self._released
        self._free.release()  # sem_post: our reads of the view happen-before the producer's reuse

    # -- monitoring -----------------------------------------------------------------------------

    def pending(self) -> int:
        """Messages published and not yet popped (approximate from another process)."""
        return int(self._items.value)

    def used_bytes(self) -> int:
        """Arena bytes not yet released, skipped tails included (approximate, for metrics)."""
        h = self._header
        used = h[_DATA_HEAD] - max(h[_DATA_TAIL], h[_RECLAIMED_DATA])
        return min(max(used, 0), self._cap)

    # -- lifetime -------------------------------------------------------------------------------

    def close(self) -> None:
        """Drop this process's handles. Views already handed out stay readable."""
        if self._closed:
            return
        self._closed = True
        self._arena = np.empty(0, np.uint8)  # drop our export so an unviewed mapping can unmap
        self._slots.release()
        self._header.release()
        self._buf.release()
        _close_quietly(self._mm, [self._items, self._free])

    def unlink(self) -> None:
        """Remove the segment and both semaphore names; open handles elsewhere stay valid."""
        unlink_ring(self.name)

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unlink_ring(name: str) -> None:
    """Remove a ring's three names, ignoring those already gone (idempotent)."""
    for unlink, target in (
        (posix_ipc.unlink_shared_memory, name),
        (posix_ipc.unlink_semaphore, name + ".items"),
        (posix_ipc.unlink_semaphore, name + ".free"),
    ):
        with contextlib.suppress(posix_ipc.ExistentialError):
            unlink(target)


def _contiguous(payload: np.ndarray | bytes | memoryview) -> tuple[np.ndarray | bytes | memoryview, int]:
    """A C-contiguous buffer with the payload's bytes, and its size in bytes."""
    if isinstance(payload, np.ndarray):
        if not payload.flags.c_contiguous:
            payload = np.ascontiguousarray(payload)
        return payload, payload.nbytes
    if isinstance(payload, memoryview):
        return (payload, payload.nbytes) if payload.c_contiguous else (payload.tobytes(), payload.nbytes)
    return payload, len(payload)


def _read_geometry(name: str, mm: mmap.mmap) -> tuple[int, int, int]:
    with memoryview(mm) as buf, buf[:HEADER_BYTES].cast("q") as h:
        magic, version = h[_MAGIC], h[_VERSION]
        nslots, cap, offset = h[_NSLOTS], h[_ARENA_BYTES], h[_ARENA_OFFSET]
    if magic != MAGIC:
        raise RingCorrupt(f"{name}: bad magic {magic:#x}")
    if version != LAYOUT_VERSION:
        raise RingCorrupt(f"{name}: layout version {version}, expected {LAYOUT_VERSION}")
    if nslots < 1 or cap < ALIGN or cap % ALIGN or offset != _arena_offset(nslots):
        raise RingCorrupt(f"{name}: bad geometry nslots={nslots} arena={cap} offset={offset}")
    if offset + cap > len(mm):
        raise RingCorrupt(f"{name}: segment of {len(mm)} bytes is smaller than its geometry")
    return nslots, cap, offset


def _init_header(mm: mmap.mmap, nslots: int, cap: int, offset: int, base: int) -> None:
    with memoryview(mm) as buf, buf[:HEADER_BYTES].cast("q") as h:
        h[_VERSION], h[_NSLOTS], h[_ARENA_BYTES], h[_ARENA_OFFSET] = LAYOUT_VERSION, nslots, cap, offset
        data_base = base & ~(ALIGN - 1)
        h[_HEAD] = h[_RECLAIMED] = h[_TAIL] = base
        h[_DATA_HEAD] = h[_RECLAIMED_DATA] = h[_DATA_TAIL] = data_base
        h[_MAGIC] = MAGIC  # last: a half-initialised segment fails the magic check


def _close_quietly(mm: mmap.mmap, sems: list[posix_ipc.Semaphore]) -> None:
    for sem in sems:
        sem.close()
    # Live numpy views still export the mapping; it is unmapped when the last one dies.
    with contextlib.suppress(BufferError):
        mm.close()


def _pause_forever(path: str) -> None:
    """Test hook: the payload and descriptor are written, nothing is published yet."""
    with open(path, "w"):
        pass
    while True:
        time.sleep(3600)
