"""Ring unit tests: both ends in one process, each test on its own uniquely named ring."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

import numpy as np
import posix_ipc
import pytest

from sie.shm.layout import LAYOUT_VERSION
from sie.shm.names import SHM_DIR
from sie.shm.ring import HEADER_BYTES, Message, PayloadTooLarge, Ring, RingCorrupt, RingMissing

from .conftest import raw_words

Names = Callable[[str], str]


def _files(name: str) -> list[str]:
    stem = name.lstrip("/")
    return [stem, f"sem.{stem}.items", f"sem.{stem}.free"]


def _pop(ring: Ring) -> Message:
    message = ring.try_pop()
    assert message is not None
    return message


def _round_trip(ring: Ring, payload: bytes, tag: int) -> None:
    assert ring.try_push(payload, tag)
    message = _pop(ring)
    assert message.tag == tag
    assert message.view.dtype == np.uint8 and message.view.flags.c_contiguous
    assert message.view.ctypes.data % 64 == 0
    assert message.view.tobytes() == payload
    ring.release(message)


@pytest.fixture
def ring(shm_name: Names) -> Ring:
    return Ring.create(shm_name("ring"), slots=8, arena_bytes=1024)


def test_round_trip_empty_one_token_and_maximum(ring: Ring) -> None:
    _round_trip(ring, b"", 1)
    _round_trip(ring, np.array([101], np.int32).tobytes(), 2)
    _round_trip(ring, os.urandom(ring.max_payload_bytes), 3)
    assert ring.used_bytes() == 0 and ring.pending() == 0


def test_maximum_payload_fits_an_empty_ring_whose_head_is_mid_arena(ring: Ring) -> None:
    _round_trip(ring, b"x" * 100, 1)
    _round_trip(ring, os.urandom(ring.max_payload_bytes), 2)


def test_payload_kinds(ring: Ring) -> None:
    tokens = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert ring.try_push(tokens, 1)
    assert ring.try_push(tokens[:, ::2], 2)  # not contiguous: copied first
    assert ring.try_push(memoryview(tokens.tobytes()), 3)
    assert ring.try_push(tokens.data[::2], 4)
    expected = [tokens, tokens[:, ::2], tokens, tokens[::2]]
    for tag, want in enumerate(expected, 1):
        message = _pop(ring)
        assert message.tag == tag
        np.testing.assert_array_equal(message.view.view(np.int32), want.reshape(-1))
        ring.release(message)


def test_fifo_order_and_u64_tags(ring: Ring) -> None:
    tags = [0, 1, 2**63, 2**64 - 1, 42]
    for tag in tags:
        assert ring.try_push(tag.to_bytes(8, "little"), tag)
    got = []
    while (message := ring.try_pop()) is not None:
        got.append((message.tag, message.view.tobytes()))
        ring.release(message)
    assert got == [(tag, tag.to_bytes(8, "little")) for tag in tags]


def test_empty_ring_pops_none(ring: Ring) -> None:
    assert ring.try_pop() is None
    _round_trip(ring, b"abc", 1)
    assert ring.try_pop() is None


@pytest.mark.parametrize("base", [0, 2**62 - 5])
def test_wrap_around_keeps_views_contiguous_and_aligned(shm_name: Names, base: int) -> None:
    ring = Ring.create(shm_name("ring"), slots=4, arena_bytes=1000, _counter_base=base)
    rng = np.random.default_rng(0)
    held: list[tuple[Message, bytes]] = []
    for tag in range(400):
        n = int(rng.integers(0, 400))
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        while not ring.try_push(payload, tag):
            message, want = held.pop(0)
            assert message.view.tobytes() == want
            ring.release(message)
        message = _pop(ring)
        assert message.tag == tag and len(message.view) == n
        assert message.view.flags.c_contiguous and message.view.ctypes.data % 64 == 0
        held.append((message, payload))
        for old, want in held:
            assert old.view.tobytes() == want  # nothing held was overwritten
    if base:
        with raw_words(ring.name) as words:
            assert words[8] > 2**62  # head counter went past 2**62
    ring.unlink()
    ring.close()


def test_full_when_slots_run_out(shm_name: Names) -> None:
    ring = Ring.create(shm_name("ring"), slots=4, arena_bytes=4096)
    for tag in range(4):
        assert ring.try_push(b"p" * 10, tag)
    before = (ring.pending(), ring.used_bytes())
    assert not ring.try_push(b"q", 99)
    assert (ring.pending(), ring.used_bytes()) == before
    first = _pop(ring)
    assert not ring.try_push(b"q", 99)  # popped is not released
    ring.release(first)
    assert ring.try_push(b"q", 4)
    tags = [_pop(ring).tag for _ in range(4)]
    assert tags == [1, 2, 3, 4]


def test_full_when_arena_runs_out_with_slots_free(shm_name: Names) -> None:
    ring = Ring.create(shm_name("ring"), slots=16, arena_bytes=256)
    for tag in range(4):
        assert ring.try_push(bytes([tag]) * 64, tag)
    before = (ring.pending(), ring.used_bytes())
    assert before == (4, 256)
    assert not ring.try_push(b"x", 99)
    assert ring.try_push(b"", 4)  # an empty payload needs a slot, not arena space
    assert (ring.pending(), ring.used_bytes()) == (5, 256)
    for tag in range(5):
        message = _pop(ring)
        assert message.tag == tag and message.view.tobytes() == bytes([tag]) * (64 if tag < 4 else 0)
        ring.release(message)


def test_payload_too_large(ring: Ring) -> None:
    with pytest.raises(PayloadTooLarge):
        ring.try_push(b"x" * (ring.max_payload_bytes + 1), 1)
    assert issubclass(PayloadTooLarge, ValueError)
    assert ring.pending() == 0


def test_corrupt_slot_seq(ring: Ring) -> None:
    assert ring.try_push(b"abc", 1)
    with raw_words(ring.name) as words:
        words[HEADER_BYTES // 8] = 12345  # slot 0 seq
    with pytest.raises(RingCorrupt):
        ring.try_pop()


@pytest.mark.parametrize(("word", "value"), [(0, 0x1234), (1, LAYOUT_VERSION + 1)])
def test_attach_rejects_bad_magic_or_version(shm_name: Names, word: int, value: int) -> None:
    ring = Ring.create(shm_name("ring"), slots=2, arena_bytes=128)
    with raw_words(ring.name) as words:
        words[word] = value
    with pytest.raises(RingCorrupt):
        Ring.attach(ring.name)


def test_attach_missing(shm_name: Names) -> None:
    with pytest.raises(RingMissing):
        Ring.attach(shm_name("nothing"))


def test_attach_without_semaphores_is_missing(shm_name: Names) -> None:
    ring = Ring.create(shm_name("ring"), slots=2, arena_bytes=128)
    posix_ipc.unlink_semaphore(ring.name + ".free")
    with pytest.raises(RingMissing):
        Ring.attach(ring.name)


def test_attached_handle_sees_the_creators_messages(shm_name: Names) -> None:
    producer = Ring.create(shm_name("ring"), slots=4, arena_bytes=512)
    consumer = Ring.attach(producer.name)
    assert consumer.max_payload_bytes == producer.max_payload_bytes
    for tag in range(10):
        assert producer.try_push(bytes([tag]) * 100, tag)
        message = _pop(consumer)
        assert message.tag == tag and message.view.tobytes() == bytes([tag]) * 100
        consumer.release(message)
    assert producer.try_pop() is None
    consumer.close()
    producer.close()


def test_release_order_is_checked(ring: Ring) -> None:
    with pytest.raises(ValueError):
        ring.release(Message(0, np.zeros(0, np.uint8), 0))
    ring.try_push(b"a" * 64, 1)
    ring.try_push(b"b" * 64, 2)
    first, second = _pop(ring), _pop(ring)
    ring.release(second)  # counted as the first release, whatever object it is
    with pytest.raises(ValueError):
        ring.release(first)


def test_close_with_live_views_keeps_them_readable(shm_name: Names) -> None:
    ring = Ring.create(shm_name("ring"), slots=2, arena_bytes=128)
    ring.try_push(b"still here", 7)
    message = _pop(ring)
    ring.close()
    ring.close()
    assert message.view.tobytes() == b"still here"
    ring.unlink()


def test_unlink_removes_segment_and_semaphores(shm_name: Names) -> None:
    ring = Ring.create(shm_name("ring"), slots=2, arena_bytes=128)
    for entry in _files(ring.name):
        assert os.path.exists(os.path.join(SHM_DIR, entry))
    ring.unlink()
    ring.unlink()
    for entry in _files(ring.name):
        assert not os.path.exists(os.path.join(SHM_DIR, entry))
    with pytest.raises(RingMissing):
        Ring.attach(ring.name)
    assert ring.try_push(b"mapping outlives the name", 1)
    ring.close()


def test_created_with_mode_0600(ring: Ring) -> None:
    for entry in _files(ring.name):
        assert stat.S_IMODE(os.stat(os.path.join(SHM_DIR, entry)).st_mode) == 0o600


def test_create_is_exclusive(ring: Ring) -> None:
    with pytest.raises(posix_ipc.ExistentialError):
        Ring.create(ring.name, slots=2, arena_bytes=128)
