"""Start and stop a throwaway `python -m sie serve` for the scripts in this folder."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    frontends: int, extra: list[str], tag: str
) -> tuple[subprocess.Popen[bytes], str, list[str], Path]:
    """A server on a free port with a unique instance name; returns once /readyz answers 200."""
    port = free_port()
    instance = tag + uuid.uuid4().hex[:10]
    argv = [sys.executable, "-m", "sie", "serve", "--port", str(port), "--instance", instance,
            "--frontends", str(frontends), "--device", "cpu", *extra]  # fmt: skip
    log_path = Path(f"/tmp/sie-{tag}-{port}.log")
    process = subprocess.Popen(argv, cwd=REPO, stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}: see {log_path}")
        if _is_ready(port):
            return process, f"http://127.0.0.1:{port}", argv[3:], log_path
        time.sleep(0.2)
    process.kill()
    raise SystemExit(f"server not ready after {START_TIMEOUT_S:.0f} s: see {log_path}")


def _is_ready(port: int) -> bool:
    # A raw request: the scripts measure CPU, and an HTTP client import per probe is not free.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def stop_server(process: subprocess.Popen[bytes]) -> int:
    process.terminate()
    try:
        return process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def server_pids(supervisor: int) -> dict[int, str]:
    """pid -> role ("device", "frontend", "supervisor") of the supervisor and its children."""
    roles = {supervisor: "supervisor"}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != supervisor:
                continue
            cmd = Path(f"/proc/{entry}/cmdline").read_text().replace("\0", " ")
        except (OSError, ValueError, IndexError):
            continue
        roles[int(entry)] = (
            "device" if " _device " in cmd else "frontend" if " _frontend " in cmd else "other"
        )
    return roles


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_role(roles: dict[int, str], since: dict[str, float] | None = None) -> dict[str, float]:
    """CPU seconds per role of a `server_pids` map, summed over its processes; less `since` (an
    earlier reading of the same map) when given."""
    spent = dict.fromkeys(roles.values(), 0.0)
    for pid, role in roles.items():
        spent[role] += cpu_seconds(pid)
    return {role: seconds - (since or {}).get(role, 0.0) for role, seconds in spent.items()}


def timed_posts(url: str, bodies: list[dict[str, Any]], concurrency: int, timeout_s: float = 300) -> float:
    """Seconds `concurrency` keep-alive clients take to POST every body (JSON) to `url`, each taking
    the next unsent body; any answer but 200 stops the benchmark."""
    import httpx  # deferred: the GPU kit starts servers with this module and may not have it

    pending = list(bodies)
    lock = threading.Lock()
    errors: list[int] = []

    def client() -> None:
        with httpx.Client(timeout=timeout_s) as http:
            while True:
                with lock:
                    if not pending:
                        return
                    body = pending.pop()
                response = http.post(url, json=body)
                if response.status_code != 200:
                    errors.append(response.status_code)

    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"the server answered {len(errors)} requests with {sorted(set(errors))}")
    return time.perf_counter() - started
