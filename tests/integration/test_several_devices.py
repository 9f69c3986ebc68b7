"""Two CPU devices: models spread over them, one device killed or stalled (SIGSTOP) takes only its
own models down, is detected by its silent heartbeat and replaced; the catalog numbering survives;
a model whose queue stays deep gets a replica on the other device."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.integration.reference import reference_embeddings
from tests.integration.server import Server, child_pids, shm_names, wait_until
from tests.integration.texts import assert_close, random_texts
from tests.integration.wire import decode, dense_matrix, encode
from tests.tiny_models.dense import make_dense, model_yaml_dense

pytestmark = pytest.mark.slow

X, Y = "tiny/x", "tiny/y"
STALL_S = 2.0
TEXTS = ["two devices", "one of them stops"]


@dataclass
class TwoDevices:
    server: Server
    models_dir: Path
    folders: dict[str, Path]


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoDevices]:
    root = tmp_path_factory.mktemp("devices")
    models_dir = root / "models"
    models_dir.mkdir()
    folders = {}
    for seed, name in enumerate((X, Y)):
        folders[name] = make_dense(root / name.replace("/", "__"), seed=seed)
        (models_dir / f"{name.replace('/', '__')}.yaml").write_text(
            yaml.safe_dump(model_yaml_dense(name, folders[name]))
        )
    server = Server(
        *("--models-dir", str(models_dir), "--device-stall-s", str(STALL_S), "--device", "cpu,cpu"),
        *("--replica-queue-depth", "8", "--replica-after-s", "0.5"),
        frontends=1,
    ).wait_ready()
    yield TwoDevices(server, models_dir, folders)
    assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []


def device_pids(server: Server) -> dict[int, int]:
    """Device index -> pid, read from each device process's spec on its command line."""
    found = {}
    for pid, cmd in child_pids(server.process.pid).items():
        if " _device " in cmd and (match := re.search(r'\{"index":(\d+),', cmd)):
            found[int(match.group(1))] = pid
    return found


def starts(server: Server, index: int) -> int:
    """How many times device `index` has come up (from the server's log)."""
    return server.log_path.read_text(errors="replace").count(f"[device{index}] sie.gpu_proc.main: device up")


def info(server: Server, name: str) -> dict[str, Any]:
    return httpx.get(f"{server.url}/v1/models/{name}", timeout=10).json()  # type: ignore[no-any-return]


def ensure_loaded(server: Server, name: str) -> str:
    """Load the model if needed; the device label it sits on ('cpu:0' or 'cpu:1')."""

    def loaded() -> str | None:
        current = info(server, name)
        if current["state"] == "loaded":
            return str(current["device"])
        if current["state"] in ("available", "failed"):
            encode(server.url, name, {"items": [{"text": "load"}]}, as_json=True)
        return None

    return wait_until(loaded, 60, f"{name} loaded", interval_s=0.1)


def answers(two: TwoDevices, name: str) -> bool:
    response = encode(two.server.url, name, {"items": [{"text": t} for t in TEXTS]}, as_json=False)
    if response.status_code != 200:
        return False
    assert_close(
        dense_matrix(decode(response)), reference_embeddings(TEXTS, two.folders[name], max_length=128)
    )
    return True


def test_models_go_to_different_devices(two: TwoDevices) -> None:
    placed = {ensure_loaded(two.server, X), ensure_loaded(two.server, Y)}
    assert placed == {"cpu:0", "cpu:1"}
    assert answers(two, X) and answers(two, Y)


def test_a_killed_device_takes_only_its_own_models_down(two: TwoDevices) -> None:
    server = two.server
    x_device, y_device = ensure_loaded(server, X), ensure_loaded(server, Y)
    assert x_device != y_device
    index = int(y_device[-1])
    up_before = starts(server, index)
    victim = device_pids(server)[index]
    os.kill(victim, signal.SIGKILL)
    while starts(server, index) == up_before:  # X keeps answering, right through Y's device restarting
        assert answers(two, X)
    assert victim not in device_pids(server).values()
    assert ensure_loaded(server, Y) == y_device  # back on the fresh device: it holds the fewest models
    assert answers(two, Y)


def test_a_stalled_device_is_detected_and_replaced(two: TwoDevices) -> None:
    server = two.server
    x_device, y_device = ensure_loaded(server, X), ensure_loaded(server, Y)
    assert x_device != y_device
    # A model file that sorts first: a child re-reading the directory would renumber every model.
    (two.models_dir / "a__first.yaml").write_text(yaml.safe_dump(model_yaml_dense("a/first", two.folders[X])))
    index = int(y_device[-1])
    up_before = starts(server, index)
    stalled = device_pids(server)[index]
    os.kill(stalled, signal.SIGSTOP)
    stopped_s = time.monotonic()
    outcome: dict[str, Any] = {}

    def send() -> None:
        outcome["response"] = encode(server.url, Y, {"items": [{"text": "stuck"}]}, as_json=True, timeout=60)
        outcome["done_s"] = time.monotonic()

    caught = threading.Thread(target=send, daemon=True)
    caught.start()
    try:
        assert answers(two, X)  # the other device serves while this one hangs
        replaced = wait_until(
            lambda: (pid := device_pids(server).get(index)) not in (None, stalled) and pid,
            STALL_S + 5,
            "the stalled device replaced",
            interval_s=0.05,
        )
    finally:
        if os.path.exists(f"/proc/{stalled}"):
            os.kill(stalled, signal.SIGCONT)
    assert time.monotonic() - stopped_s <= STALL_S + 5
    caught.join(30)
    response = outcome["response"]
    assert response.status_code == 503 and response.json()["detail"]["code"] == "DEVICE_UNAVAILABLE"
    assert outcome["done_s"] - stopped_s <= STALL_S + 5
    assert replaced != stalled
    wait_until(lambda: starts(server, index) > up_before, 60, "the new device up")
    assert ensure_loaded(server, Y) == y_device
    assert answers(two, Y) and answers(two, X)  # same numbering: each model still answers as itself
    # The directory is live: the new file is served under a slot of its own, and nobody is renumbered.
    wait_until(
        lambda: "a/first" in [m["name"] for m in httpx.get(f"{server.url}/v1/models").json()["models"]],
        15,
        "the added model listed",
    )
    assert answers(two, Y) and answers(two, X)


def test_a_model_whose_queue_stays_deep_gets_a_second_replica(two: TwoDevices) -> None:
    server = two.server
    assert ensure_loaded(server, X) != ensure_loaded(server, Y)
    texts = random_texts(200, 30, seed=3, numbered=True)  # batches of 64: the rest waits, deep
    outcome: dict[str, Any] = {}
    placed = threading.Event()

    def send() -> None:
        # Bursts one after another until the replica is placed: how long one burst keeps the queue
        # deep depends on the box and the forward's speed, and the frontend looks once a second.
        while True:
            outcome["response"] = encode(
                server.url, X, {"items": [{"text": t} for t in texts]}, as_json=False
            )
            if placed.is_set() or outcome["response"].status_code != 200:
                return

    burst = threading.Thread(target=send, daemon=True)
    burst.start()
    try:
        wait_until(
            lambda: info(server, X)["device"] == "cpu:0,cpu:1", 60, "X on both devices", interval_s=0.1
        )
    finally:
        placed.set()
    burst.join(120)
    response = outcome["response"]
    assert response.status_code == 200, response.text
    rows = list(range(0, len(texts), 13))  # a sample: the reference runs one text at a time
    reference = reference_embeddings([texts[i] for i in rows], two.folders[X], max_length=128)
    assert_close(dense_matrix(decode(response))[rows], reference)
