"""Names and the stale-name sweep, on a scratch directory with an injected liveness check."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sie.shm import Namespace, pid_alive, remove_namespace, sweep_stale


def test_names() -> None:
    ns = Namespace("main", 1234)
    assert ns.prefix == "/sie.main.1234"
    assert ns.control() == "/sie.main.1234.ctl"
    assert ns.ring(0, 1, 2, "req") == "/sie.main.1234.d0.f1.g2.req"
    assert ns.ring(3, 0, 0, "resp") == "/sie.main.1234.d3.f0.g0.resp"
    assert ns.doorbell(1, 7) == "/sie.main.1234.d1.g7.bell"


@pytest.mark.parametrize("instance", ["", "a.b", "a/b", "x y", "é"])
def test_instance_is_validated(instance: str) -> None:
    with pytest.raises(ValueError):
        Namespace(instance, 1)


def test_bad_fields_are_rejected() -> None:
    ns = Namespace("ok_-1", 1)
    with pytest.raises(ValueError):
        Namespace("ok", 0)
    with pytest.raises(ValueError):
        ns.ring(0, 0, 0, "sideways")
    with pytest.raises(ValueError):
        ns.doorbell(-1, 0)


def test_sweep_and_remove_on_a_scratch_dir(tmp_path: Path) -> None:
    entries = [
        "sie.a.100.ctl",
        "sie.a.100.d0.f0.g0.req",
        "sem.sie.a.100.d0.f0.g0.req.items",
        "sem.sie.a-b.100.d0.g0.bell",
        "sie.a.200.ctl",
        "sem.sie.a.200.d0.g1.bell",
        "sie.a.x.ctl",  # no pid: not ours
        "other.a.100.ctl",
        "sem.other",
    ]
    for entry in entries:
        (tmp_path / entry).touch()
    asked: list[int] = []

    def alive(pid: int) -> bool:
        asked.append(pid)
        return pid == 200

    removed = sweep_stale(str(tmp_path), is_alive=alive)
    assert sorted(removed) == sorted(entries[:4])
    assert sorted(asked) == [100, 200], "one liveness check per pid"
    assert sorted(os.listdir(tmp_path)) == sorted(entries[4:])
    assert sorted(remove_namespace(Namespace("a", 200), str(tmp_path))) == sorted(entries[4:6])
    assert sweep_stale(str(tmp_path / "missing"), is_alive=alive) == []


def test_pid_alive() -> None:
    assert pid_alive(os.getpid())
    assert pid_alive(1)  # init: alive, and possibly another user's (EPERM counts as alive)
    assert not pid_alive(0) and not pid_alive(-5)
