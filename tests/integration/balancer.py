"""HAProxy on loopback in front of real sie servers, and a load of clients that behave like the SDK.

The balancer runs the shipped `deploy/haproxy.cfg`, changed only where loopback needs it:
addresses, ports, a faster check interval, logs to a file, no privilege drop.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.integration.server import REPO, free_port, wait_until

SHIPPED_CONFIG = REPO / "deploy" / "haproxy.cfg"
CHECK_INTER_MS = 300  # fall 2: a server is out about 0.6-0.9 s after it stops answering /readyz
RETRY_BUDGET_S = 30.0  # how long one call keeps honouring Retry-After (the SDK's provision timeout)


def find_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and os.access(f"/usr/sbin/{name}", os.X_OK):  # not on a non-root PATH
        found = f"/usr/sbin/{name}"
    return found


def loopback_config(shipped: str, port: int, stats_port: int, servers: dict[str, int], socket: Path) -> str:
    """The shipped config for this box; every edit must match, so a reshaped config fails loudly."""
    edits = [
        (r"^ *log /dev/log local0$", "    log stdout format raw local0"),
        (r"^ *(user|group) haproxy\n", ""),
        (r"stats socket \S+", f"stats socket {socket}"),
        (r"^ *bind :8080$", f"    bind 127.0.0.1:{port}"),
        (r"^ *bind 127\.0\.0\.1:8404$", f"    bind 127.0.0.1:{stats_port}"),
        (r"inter 1s fall 2 rise 3", f"inter {CHECK_INTER_MS}ms fall 2 rise 2"),
    ]
    edits += [(rf"^( *server {name}) \S+", rf"\1 127.0.0.1:{port_}") for name, port_ in servers.items()]
    text = shipped
    for pattern, replacement in edits:
        text, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
        assert count >= 1, f"deploy/haproxy.cfg no longer has {pattern!r}"
    return text


class Haproxy:
    def __init__(self, binary: str, servers: dict[str, int], workdir: Path) -> None:
        self.port, self.stats_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "haproxy.cfg"
        text = SHIPPED_CONFIG.read_text()
        config.write_text(loopback_config(text, self.port, self.stats_port, servers, workdir / "admin.sock"))
        self.log_path = workdir / "haproxy.log"
        self._log = self.log_path.open("wb")
        # -db: stay in the foreground, so the process we hold is HAProxy itself.
        self.process = subprocess.Popen(
            [binary, "-db", "-f", str(config)], stdout=self._log, stderr=subprocess.STDOUT
        )

    def states(self) -> dict[str, str]:
        """Server name -> "UP", "DOWN", "UP 1/2" (going down), ... from the stats page's CSV."""
        response = httpx.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=5)
        rows = csv.DictReader(io.StringIO(response.text.lstrip("# ")))
        return {r["svname"]: r["status"] for r in rows if r["pxname"] == "sie" and r["svname"] != "BACKEND"}

    def wait_state(self, server: str, state: str, timeout_s: float) -> float:
        """Wait until HAProxy shows `server` in `state`; return when that was (monotonic)."""
        wait_until(lambda: self._state_or_none(server) == state, timeout_s, f"{server} {state}", 0.05)
        return time.monotonic()

    def _state_or_none(self, server: str) -> str | None:
        try:
            return self.states().get(server)
        except httpx.HTTPError:
            return None

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self._log.close()


# -- models ------------------------------------------------------------------------------------------


def tiny_models_dir(root: Path, ids: list[str]) -> Path:
    """One tiny random BERT (MiniLM's tokenizer) served under several ids, one YAML each."""
    import torch
    import transformers

    from tests.integration.reference import minilm_dir
    from tests.tiny_models.splade import TOKENIZER_FILES

    weights = root / "weights"
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(weights)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, weights / name)
    models = root / "models"
    models.mkdir()
    for sie_id in ids:
        description = {
            "sie_id": sie_id,
            "weights": {"path": str(weights)},
            "tasks": {"encode": {"dense": {"dim": 32}}},
            "max_sequence_length": 128,
            "adapter": "dense",
        }
        (models / f"{sie_id.replace('/', '__')}.yaml").write_text(yaml.safe_dump(description))
    return models


# -- clients -----------------------------------------------------------------------------------------


@dataclass
class Call:
    """One logical request: every attempt it took (the client honours 503 Retry-After)."""

    model: str
    started_s: float
    attempts: list[tuple[float, int, str, str]] = field(default_factory=list)  # (at, status, instance, code)
    error: str = ""  # a transport error the balancer let through

    @property
    def status(self) -> int:
        return self.attempts[-1][1] if self.attempts and not self.error else 0

    @property
    def instance(self) -> str:
        return self.attempts[-1][2] if self.attempts else ""

    @property
    def cut(self) -> bool:
        """The answer's headers arrived and its body never did: its server died between the two.

        No balancer can retry these (the response had begun), so only a kill may cause them.
        """
        return "without sending complete message body" in self.error

    @property
    def ended_s(self) -> float:
        return self.attempts[-1][0] if self.attempts else self.started_s


def error_code(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    detail = body.get("detail") or body.get("error") or {}
    return str(detail.get("code", "")) if isinstance(detail, dict) else ""


def call(client: httpx.Client, url: str, model: str, text: str, *, openai: bool = False) -> Call:
    """Send one request; on 503 sleep Retry-After and send it again, as the SDK does."""
    result = Call(model, time.monotonic())
    if openai:
        path, body = "/v1/embeddings", {"model": model, "input": text}
    else:
        path, body = f"/v1/encode/{model}", {"items": [{"text": text}]}
    while True:
        try:
            response = client.post(url + path, json=body, headers={"accept": "application/json"})
        except httpx.TransportError as exc:
            result.error = f"{type(exc).__name__}: {exc}"
            return result
        instance = response.headers.get("x-sie-instance", "")
        result.attempts.append((time.monotonic(), response.status_code, instance, error_code(response)))
        retry_after = response.headers.get("retry-after")
        if response.status_code != 503 or retry_after is None:
            return result
        if time.monotonic() + float(retry_after) > result.started_s + RETRY_BUDGET_S:
            return result
        time.sleep(float(retry_after))


class Load:
    """`clients` threads calling every model in turn until stopped, each with its own connection."""

    def __init__(self, url: str, models: list[str], clients: int = 4) -> None:
        self.url, self.models = url, models
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(RETRY_BUDGET_S + 10)
            assert not thread.is_alive(), "a client is stuck"

    def _run(self, index: int) -> None:
        with httpx.Client(timeout=60) as client:
            n = index
            while not self._stop.is_set():
                model = self.models[n % len(self.models)]
                done = call(client, self.url, model, f"sentence {n} from client {index}", openai=n % 3 == 0)
                with self._lock:
                    self.calls.append(done)
                n += 1

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)

    def wait_for(self, check: Callable[[list[Call]], bool], timeout_s: float, what: str) -> None:
        wait_until(lambda: check(self.snapshot()), timeout_s, what, 0.05)


def failures(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c.status != 200]
