"""The ring against a model: a deque of messages plus the slot and arena accounting it must obey."""

from __future__ import annotations

import os
import uuid
from collections import deque

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from sie.shm.ring import Message, PayloadTooLarge, Ring, unlink_ring

ALIGN = 64


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class RingMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ring: Ring | None = None
        self.pending: deque[tuple[int, bytes]] = deque()
        self.held: deque[tuple[Message, bytes]] = deque()
        self.next_tag = 0

    @initialize(
        slots=st.integers(1, 6),
        arena=st.sampled_from([64, 200, 256, 1000]),
        base=st.sampled_from([0, 3, 2**62 - 7]),
    )
    def create(self, slots: int, arena: int, base: int) -> None:
        name = f"/sietest.{os.getpid()}.{uuid.uuid4().hex[:12]}.prop"
        self.ring = Ring.create(name, slots=slots, arena_bytes=arena, _counter_base=base)
        self.nslots, self.cap = slots, _aligned(arena)
        # Model counters, mirroring shm-design.md 2.3: slot count and 64-aligned arena bytes.
        self.head = self.released = base
        self.data_head = self.reclaimed_data = base - base % ALIGN

    def teardown(self) -> None:
        if self.ring is not None:
            self.ring.unlink()
            self.ring.close()

    def model_fits(self, n: int) -> bool:
        """Where a payload would go, committing the model if it fits. The skip rule included."""
        alloc = _aligned(n)
        if self.head - self.released >= self.nslots:
            return False
        head, reclaimed = self.data_head, self.reclaimed_data
        pos = head % self.cap
        if pos + alloc > self.cap:  # never wrap: skip to the arena start
            if reclaimed == head:  # an empty arena loses nothing by the skip
                reclaimed += self.cap - pos
            head += self.cap - pos
        if head + alloc - reclaimed > self.cap:
            return False
        self.head += 1
        self.data_head, self.reclaimed_data = head + alloc, reclaimed
        return True

    @rule(n=st.one_of(st.integers(0, 300), st.integers(0, 1100), st.sampled_from([0, 1, 63, 64, 65])))
    def push(self, n: int) -> None:
        assert self.ring is not None
        payload = os.urandom(n)
        tag = self.next_tag
        if _aligned(n) > self.cap:
            try:
                self.ring.try_push(payload, tag)
            except PayloadTooLarge:
                return
            raise AssertionError("oversize payload accepted")
        pushed = self.ring.try_push(payload, tag)
        assert pushed == self.model_fits(n)
        if pushed:
            self.pending.append((tag, payload))
            self.next_tag += 1

    @rule()
    def pop(self) -> None:
        assert self.ring is not None
        message = self.ring.try_pop()
        assert (message is None) == (not self.pending)
        if message is None:
            return
        tag, payload = self.pending.popleft()
        assert message.tag == tag and message.view.tobytes() == payload
        assert message.view.ctypes.data % ALIGN == 0
        start = message.view.ctypes.data
        for other, _ in self.held:  # live views never share arena bytes
            lo = other.view.ctypes.data
            assert start + len(message.view) <= lo or lo + len(other.view) <= start or not len(other.view)
        self.held.append((message, payload))

    @precondition(lambda self: bool(self.held))
    @rule()
    def release(self) -> None:
        assert self.ring is not None
        message, payload = self.held.popleft()
        assert message.view.tobytes() == payload
        self.ring.release(message)
        self.released += 1
        self.reclaimed_data = max(self.reclaimed_data, message.end)

    @invariant()
    def accounting(self) -> None:
        if self.ring is None:
            return
        assert self.ring.pending() == len(self.pending)
        used = self.ring.used_bytes()
        assert 0 <= used <= self.cap
        if not self.pending and not self.held:
            assert used == 0
        for message, payload in self.held:
            assert message.view.tobytes() == payload


RingMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)
TestRing = RingMachine.TestCase


def test_model_matches_a_hand_checked_wrap() -> None:
    name = f"/sietest.{os.getpid()}.{uuid.uuid4().hex[:12]}.wrap"
    ring = Ring.create(name, slots=4, arena_bytes=256)
    try:
        assert ring.try_push(b"a" * 100, 1)  # [0, 128)
        assert ring.try_push(b"b" * 64, 2)  # [128, 192)
        first = ring.try_pop()
        assert first is not None
        ring.release(first)
        assert ring.try_push(b"c" * 100, 3)  # 192 + 128 > 256: skips to [0, 128)
        assert not ring.try_push(b"d", 4)  # [128, 192) is still held; the skipped tail counts
        second, third = ring.try_pop(), ring.try_pop()
        assert second is not None and third is not None
        base = third.view.ctypes.data
        assert second.view.ctypes.data - base == 128
        assert np.all(third.view == ord("c"))
    finally:
        unlink_ring(name)
        ring.close()
