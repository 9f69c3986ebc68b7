"""Rings, doorbells and names across real processes. Every wait has a deadline."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from sie.shm import (
    SHM_DIR,
    Doorbell,
    EventFd,
    Namespace,
    Ring,
    RingMissing,
    pid_alive,
    remove_namespace,
    sweep_stale,
)
from sie.shm.ring import HEADER_BYTES

from .conftest import raw_words
from .workload import TIMEOUT_S, payload_for, read_line, spawn, stop, wait_for

Names = Callable[[str], str]

PRODUCER = """
import sys, time
from sie.shm import Doorbell, Ring
from tests.shm.workload import payload_for
name, bell_name, producer, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ring, bell = Ring.attach(name), Doorbell.attach(bell_name)
deadline = time.monotonic() + 20
for seq in range(count):
    payload = payload_for(producer, seq)
    while not ring.try_push(payload, seq):
        if time.monotonic() > deadline:
            sys.exit("ring stayed full")
        time.sleep(0.0002)  # full: back off as a frontend answering 503 would
    bell.ring()
"""

KILLED_PRODUCER = """
import os, sys
from sie.shm import Ring
from sie.shm.ring import PAUSE_ENV
from tests.shm.workload import payload_for
name, pause_file, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
ring = Ring.attach(name)
for seq in range(count):
    assert ring.try_push(payload_for(0, seq), seq)
os.environ[PAUSE_ENV] = pause_file  # read when a Ring is built, so only the next handle pauses
Ring.attach(name).try_push(payload_for(0, count), count)
"""

ECHO = """
import sys, time
from sie.shm import Doorbell, Ring
req, resp, bell = Ring.attach(sys.argv[1]), Ring.attach(sys.argv[2]), Doorbell.attach(sys.argv[3])
print("ready", flush=True)
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    bell.wait(0.1)
    while (message := req.try_pop()) is not None:
        while not resp.try_push(message.view, message.tag):
            time.sleep(0.0001)
        req.release(message)
"""

EVENTFD_RINGER = """
import sys
from sie.shm import EventFd
efd = EventFd(int(sys.argv[1]))
for _ in sys.stdin:
    efd.ring()
"""


@pytest.fixture
def namespace() -> Iterator[Namespace]:
    ns = Namespace(f"t{uuid.uuid4().hex[:12]}", os.getpid())
    yield ns
    remove_namespace(ns)


def _check_exit(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        code = proc.poll()
        assert code in (None, 0), f"child {proc.pid} exited with {code}"


def test_four_producers_one_consumer_every_byte(shm_name: Names) -> None:
    count, producers = 600, 4
    rings = [Ring.create(shm_name(f"p{p}"), slots=32, arena_bytes=32 << 10) for p in range(producers)]
    bell = Doorbell.create(shm_name("bell"))
    procs = [spawn(PRODUCER, rings[p].name, bell.name, p, count) for p in range(producers)]
    try:
        got = [0] * producers
        deadline = time.monotonic() + TIMEOUT_S
        while sum(got) < producers * count:
            assert time.monotonic() < deadline, f"only {got} arrived"
            _check_exit(procs)
            bell.wait(0.1)
            for p, ring in enumerate(rings):
                while (message := ring.try_pop()) is not None:
                    assert message.tag == got[p], "per-ring FIFO order"
                    assert message.view.tobytes() == payload_for(p, got[p]).tobytes()
                    ring.release(message)
                    got[p] += 1
        for proc in procs:
            assert proc.wait(timeout=TIMEOUT_S) == 0
        assert all(ring.try_pop() is None for ring in rings)
    finally:
        for proc in procs:
            stop(proc)
        for ring in rings:
            ring.unlink()
            ring.close()
        bell.unlink()
        bell.close()


def test_producer_killed_before_publish_leaves_only_published_messages(
    shm_name: Names, tmp_path: object
) -> None:
    count = 25
    ring = Ring.create(shm_name("ring"), slots=64, arena_bytes=64 << 10)
    pause_file = os.path.join(str(tmp_path), "paused")
    proc = spawn(KILLED_PRODUCER, ring.name, pause_file, count)
    try:
        wait_for(lambda: os.path.exists(pause_file) or proc.poll() is not None, what="the pause hook")
        assert proc.poll() is None, "producer exited instead of pausing"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=TIMEOUT_S) == -signal.SIGKILL
        with raw_words(ring.name) as words:
            slot = HEADER_BYTES // 8 + 4 * count
            assert words[slot + 3] == count, "the hook ran after the descriptor was written"
            assert words[slot] != count + 1, "and before the commit marker"
        for seq in range(count):
            message = ring.try_pop()
            assert message is not None and message.tag == seq
            assert message.view.tobytes() == payload_for(0, seq).tobytes()
            ring.release(message)
        assert ring.try_pop() is None and ring.pending() == 0
    finally:
        stop(proc)
        ring.unlink()
        ring.close()


def _echo(req: Ring, resp: Ring, bell: Doorbell, tag: int) -> None:
    payload = payload_for(1, tag)
    assert req.try_push(payload, tag)
    bell.ring()
    got: list[bytes] = []

    def answered() -> bool:
        message = resp.try_pop()
        if message is None:
            return False
        assert message.tag == tag
        got.append(message.view.tobytes())
        resp.release(message)
        return True

    wait_for(answered, what=f"echo of {tag}")
    assert got == [payload.tobytes()]


def _generation(ns: Namespace, gen: int) -> tuple[Ring, Ring, Doorbell]:
    return (
        Ring.create(ns.ring(0, 0, gen, "req"), slots=8, arena_bytes=64 << 10),
        Ring.create(ns.ring(0, 0, gen, "resp"), slots=8, arena_bytes=64 << 10),
        Doorbell.create(ns.doorbell(0, gen)),
    )


def test_consumer_restart_gets_fresh_rings(namespace: Namespace) -> None:
    old = _generation(namespace, 0)
    first = spawn(ECHO, old[0].name, old[1].name, old[2].name, stdout=subprocess.PIPE)
    second = None
    try:
        assert read_line(first) == b"ready\n"
        _echo(*old, tag=1)
        assert old[0].try_push(b"in flight when the consumer dies", 2)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=TIMEOUT_S)
        # The supervisor replaces, never resumes: new generation names, old ones unlinked.
        new = _generation(namespace, 1)
        for obj in old:
            obj.unlink()
            obj.close()
        second = spawn(ECHO, new[0].name, new[1].name, new[2].name, stdout=subprocess.PIPE)
        assert read_line(second) == b"ready\n"
        _echo(*new, tag=3)
        for name in (namespace.ring(0, 0, 0, "req"), namespace.ring(0, 0, 0, "resp")):
            with pytest.raises(RingMissing):
                Ring.attach(name)
        left = sorted(e for e in os.listdir(SHM_DIR) if namespace.prefix[1:] in e)
        assert left and all(".g1." in e for e in left), left
        for obj in new:
            obj.close()
    finally:
        stop(first)
        if second is not None:
            stop(second)


def test_sweep_removes_a_dead_pids_names_and_never_a_live_ones() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=TIMEOUT_S)  # reaped: the pid is now really dead
    me, dead = os.getpid(), child.pid
    assert pid_alive(me) and not pid_alive(dead)
    instance = f"t{uuid.uuid4().hex[:12]}"
    spaces = {pid: Namespace(instance, pid) for pid in (me, dead)}

    def only_these(pid: int) -> bool:  # leave other runs' leftovers in /dev/shm alone
        return pid_alive(pid) if pid in spaces else True

    try:
        for ns in spaces.values():
            Ring.create(ns.ring(0, 1, 2, "req"), slots=2, arena_bytes=64).close()
            Doorbell.create(ns.doorbell(0, 2)).close()
        stem = spaces[dead].prefix[1:]
        ring = f"{stem}.d0.f1.g2.req"
        expected = sorted([ring, f"sem.{ring}.items", f"sem.{ring}.free", f"sem.{stem}.d0.g2.bell"])
        assert sorted(sweep_stale(is_alive=only_these)) == expected
        assert sweep_stale(is_alive=only_these) == []
        assert len(remove_namespace(spaces[me])) == 4
    finally:
        for ns in spaces.values():
            remove_namespace(ns)


def test_eventfd_watcher_resolves_futures_rung_by_another_process() -> None:
    efd = EventFd.create()
    proc = spawn(EVENTFD_RINGER, efd.fd, stdin=subprocess.PIPE, pass_fds=[efd.fd])
    assert proc.stdin is not None

    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        waiting: list[asyncio.Future[int]] = []
        wakes = [0]

        def on_wake() -> None:
            wakes[0] += 1
            while waiting:
                waiting.pop().set_result(wakes[0])

        efd.watch(loop, on_wake)
        results = []
        for _ in range(3):
            future = loop.create_future()
            waiting.append(future)
            proc.stdin.write(b"ring\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]
            results.append(await asyncio.wait_for(future, TIMEOUT_S))
        efd.unwatch()
        return results

    try:
        assert asyncio.run(main()) == [1, 2, 3]
        assert not efd.clear()
        proc.stdin.close()
        assert proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        stop(proc)
        efd.close()


def test_payloads_differ_per_producer_and_seq() -> None:
    seen = {payload_for(p, s).tobytes() for p in range(4) for s in range(1, 50)}
    assert len(seen) == 4 * 49
    assert payload_for(0, 0).dtype == np.int32
