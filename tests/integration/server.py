"""A real `python -m sie serve` in a subprocess, for integration tests: start, wait, stop, inspect."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 90.0
# A drain never waits on a client that stopped sending (sie.frontend.client_watch), so an orderly
# stop of a test server is a matter of seconds.
STOP_LIMIT_S = 10.0
T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.05) -> T:
    """Poll `check` until it returns something truthy (returned), or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"not true after {timeout_s}s: {what}")
        time.sleep(interval_s)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (from /proc); 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def shm_names(instance: str) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if f"sie.{instance}." in n)


def child_pids(parent: int) -> dict[int, str]:
    """pid -> command line of every direct child of `parent` (read from /proc)."""
    children: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent:
                children[int(entry)] = Path(f"/proc/{entry}/cmdline").read_text().replace("\0", " ")
        except (OSError, ValueError, IndexError):
            continue
    return children


class Server:
    def __init__(
        self,
        *args: str,
        frontends: int | None = 2,
        env: dict[str, str] | None = None,
        instance: str | None = None,
        port: int | None = None,
        own_group: bool = False,
    ) -> None:
        """`frontends=None` passes no --frontends flag (the environment or the default decides).

        `instance` and `port` restart a server where a killed one was; `own_group` puts it in a
        process group of its own, so a test can SIGKILL the whole server and nothing else.
        """
        self.port = port or free_port()
        self.instance = instance or "t" + uuid.uuid4().hex[:10]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(f"/tmp/sie-test-{self.instance}.log")
        argv = [
            sys.executable,
            "-m",
            "sie",
            "serve",
            "--port",
            str(self.port),
            "--instance",
            self.instance,
            *(["--frontends", str(frontends)] if frontends is not None else []),
            "--device",
            "cpu",
            "--torch-threads",
            "1",
            *args,
        ]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=own_group,
        )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S, path: str = "/readyz") -> Server:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + path, timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"server not ready after {timeout_s}s:\n{self.log()}")

    def roles(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {"device": [], "frontend": []}
        for pid, cmd in child_pids(self.process.pid).items():
            for role in found:
                if f" _{role} " in cmd:
                    found[role].append(pid)
        return found

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Stop the server; a SIGTERM or SIGINT stop must be prompt and leave /dev/shm clean."""
        running = self.process.poll() is None
        took_s = 0.0
        if running:
            started = time.monotonic()
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            took_s = time.monotonic() - started
        self._log.close()
        if running and sig in (signal.SIGTERM, signal.SIGINT):
            assert took_s < STOP_LIMIT_S, f"stopping took {took_s:.1f} s:\n{self.log()}"
            assert shm_names(self.instance) == [], f"left in /dev/shm: {shm_names(self.instance)}"
        return self.process.returncode

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-8000:]


def metric_sum(server: Server, name: str, **labels: str) -> float:
    """The sum of a /metrics sample over the series whose labels match."""
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )
