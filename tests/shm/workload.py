"""Helpers shared by the tests and the child processes they start (imported as tests.shm.workload)."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 20.0


def payload_for(producer: int, seq: int) -> np.ndarray:
    """0-700 int32 tokens, different for every (producer, seq), cheap to recompute to verify."""
    n = (seq * 7919 + producer * 104729) % 701
    return (np.arange(n, dtype=np.int64) * 31 + seq * 1000 + producer).astype(np.int32)


def spawn(code: str, *args: object, **kwargs: Any) -> subprocess.Popen[bytes]:
    """Run `code` in a fresh interpreter that can import sie and tests.shm."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIE_SHM_TEST_")}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-c", code, *map(str, args)]
    return subprocess.Popen(argv, cwd=REPO, env=env, **kwargs)


def read_line(proc: subprocess.Popen[bytes], timeout_s: float = TIMEOUT_S) -> bytes:
    """One line of the child's stdout, or an AssertionError after `timeout_s`."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "child wrote nothing before the deadline"
    return proc.stdout.readline()


def wait_for(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S, what: str = "condition") -> None:
    """Poll a cheap condition until it holds; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.001)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=TIMEOUT_S)
