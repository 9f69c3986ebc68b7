"""Process figures for /metrics match what the kernel reports in /proc for the same process."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from sie.frontend.hostinfo import process_usage

MIB = 1 << 20


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_memory_and_cpu_of_a_live_process_match_proc() -> None:
    ballast = bytearray(64 * MIB)  # touched anonymous memory: RSS and RssAnon both hold it
    ballast[::4096] = b"x" * len(ballast[::4096])
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # some CPU time to count
        pass
    pid = os.getpid()
    usage = process_usage(pid)
    rss, anonymous = status_kib(pid, "VmRSS") * 1024, status_kib(pid, "RssAnon") * 1024
    times = os.times()
    assert usage is not None
    assert abs(usage.rss_bytes - rss) < 4 * MIB, (usage, rss)
    assert abs(usage.anonymous_bytes - anonymous) < 4 * MIB, (usage, anonymous)
    assert usage.anonymous_bytes > 64 * MIB and usage.anonymous_bytes < usage.rss_bytes
    assert abs(usage.cpu_s - (times.user + times.system)) < 0.1, (usage, times)
    del ballast


def test_gone_zombie_and_unknown_processes_have_no_figures() -> None:
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never became a zombie"
        time.sleep(0.01)
    assert process_usage(child.pid) is None  # exited, not yet reaped
    child.wait()
    assert process_usage(child.pid) is None
    assert process_usage(0) is None and process_usage(-1) is None
