"""The stale-name sweep never stops a start: leftovers it may not remove are left, and said so."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from sie.shm.names import pid_alive, sweep_stale


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait(10)
    return child.pid


def make_immutable(path: Path) -> None:
    """chattr +i: even root gets EPERM on unlink, as another user's file in sticky /dev/shm would.

    Without it the test would prove nothing about such files, so it fails rather than skip the case.
    """
    try:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        pytest.fail("chattr is missing (Debian's e2fsprogs): the unremovable entry cannot be made")
    assert done.returncode == 0, f"chattr +i failed (it needs root and ext4, xfs or btrfs): {done.stderr}"
    with pytest.raises(PermissionError):
        path.unlink()  # the entry really cannot be removed


def test_entries_that_cannot_be_removed_are_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pid = dead_pid()
    removable = tmp_path / f"sie.gone.{pid}.ctl"
    a_directory = tmp_path / f"sie.gone.{pid}.d0.g1.bell"
    locked = tmp_path / f"sem.sie.gone.{pid}.d0.f0.g1.req.items"
    removable.write_bytes(b"x")
    a_directory.mkdir()
    locked.write_bytes(b"x")
    try:
        make_immutable(locked)
        with caplog.at_level(logging.WARNING, logger="sie.shm.names"):
            removed = sweep_stale(str(tmp_path))
    finally:
        subprocess.run(["chattr", "-i", str(locked)], capture_output=True, check=False)
    assert removed == [removable.name]
    assert not removable.exists() and a_directory.is_dir() and locked.exists()
    (record,) = [r for r in caplog.records if "may not remove" in r.getMessage()]
    assert {a_directory.name, locked.name} <= set(record.names)  # type: ignore[attr-defined]


def test_an_unreadable_directory_sweeps_nothing(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_bytes(b"")
    assert sweep_stale(str(not_a_directory)) == []


def test_names_that_only_look_like_ours_are_left_alone(tmp_path: Path) -> None:
    huge = tmp_path / f"sie.x.{10**30}.ctl"  # no such pid can exist: not a server of ours
    huge.write_bytes(b"x")
    assert sweep_stale(str(tmp_path)) == []
    assert huge.exists()
    assert pid_alive(10**30)
