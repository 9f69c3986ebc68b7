"""Many models on one device: eviction under a memory bound in LRU order, idle unload, failed-load
cool-down and retry, and requests in flight while another model is evicted. Real servers."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from tests.integration.reference import reference_embeddings
from tests.integration.server import Server, shm_names, wait_until
from tests.integration.texts import assert_close, random_texts
from tests.integration.wire import decode, dense_matrix, encode
from tests.tiny_models.dense import make_dense, model_yaml_dense

pytestmark = pytest.mark.slow

MODELS = [f"tiny/dense-{c}" for c in "abcd"]
A, B, C, D = MODELS
THRESHOLD_PERCENT = 80
LOAD_S = 60.0


@dataclass
class Built:
    models_dir: Path
    folders: dict[str, Path]


def build(root: Path, names: list[str]) -> Built:
    models_dir = root / "models"
    models_dir.mkdir(parents=True)
    folders = {}
    for seed, name in enumerate(names):
        folder = folders[name] = make_dense(root / "weights" / name.replace("/", "__"), seed=seed)
        (models_dir / f"{name.replace('/', '__')}.yaml").write_text(
            yaml.safe_dump(model_yaml_dense(name, folder))
        )
    return Built(models_dir, folders)


def model_info(server: Server, name: str) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/v1/models/{name}", timeout=10)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def states(server: Server) -> dict[str, str]:
    models = httpx.get(f"{server.url}/v1/models", timeout=10).json()["models"]
    return {m["name"]: m["state"] for m in models}


def held_bytes(server: Server) -> dict[str, int]:
    """What each model holds on the device now (loaded or still unloading), from /v1/models."""
    models = httpx.get(f"{server.url}/v1/models", timeout=10).json()["models"]
    return {m["name"]: m["memory_bytes"] for m in models if m["memory_bytes"]}


def wait_state(server: Server, name: str, state: str, timeout_s: float = LOAD_S) -> dict[str, Any]:
    return wait_until(
        lambda: (info := model_info(server, name))["state"] == state and info, timeout_s, f"{name} {state}"
    )


def encode_loaded(server: Server, name: str, texts: list[str]) -> np.ndarray:
    """Encode, loading the model first if it is not loaded (the first request starts the load)."""
    body = {"items": [{"text": t} for t in texts]}
    response = encode(server.url, name, body, as_json=False)
    if response.status_code == 503:
        detail = response.json()["detail"]
        assert (detail["code"], response.headers["retry-after"]) == ("MODEL_LOADING", "5"), detail
        wait_state(server, name, "loaded")
        response = encode(server.url, name, body, as_json=False)
    assert response.status_code == 200, response.text
    return dense_matrix(decode(response))


# -- a server whose models outgrow its memory ------------------------------------------------------


@dataclass
class Bounded:
    server: Server
    built: Built
    capacity: int


@pytest.fixture(scope="module")
def lifecycle_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lifecycle")


@pytest.fixture(scope="module")
def lifecycle(lifecycle_root: Path) -> Iterator[tuple[Server, Built]]:
    """Idle unload after 2 s, and a 3 s cool-down after a failed load; one model's weights broken."""
    built = build(lifecycle_root, ["tiny/ok", "tiny/broken"])
    (built.folders["tiny/broken"] / "model.safetensors").write_bytes(b"not weights")
    server = Server(
        "--models-dir",
        str(built.models_dir),
        "--idle-evict-s",
        "2",
        "--load-failure-cooldown-s",
        "3",
        frontends=1,
    ).wait_ready()
    yield server, built
    assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []


@pytest.fixture(scope="module")
def bounded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bounded]:
    """Four ~60 MB models on a CPU device whose threshold leaves room for two and a half of them:
    a bound on a CPU device counts the bytes its models hold, whatever the process's RSS."""
    built = build(tmp_path_factory.mktemp("bounded"), MODELS)
    model_bytes = (built.folders[A] / "model.safetensors").stat().st_size
    capacity = int(2.5 * model_bytes * 100 / THRESHOLD_PERCENT)
    server = Server(
        "--models-dir",
        str(built.models_dir),
        "--device-memory-bytes",
        str(capacity),
        "--memory-pressure-threshold-percent",
        str(THRESHOLD_PERCENT),
        "--max-batch-requests",
        "4",
        frontends=1,
    ).wait_ready()
    yield Bounded(server, built, capacity)
    assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []


def test_round_robin_over_more_models_than_fit_evicts_least_recently_used(bounded: Bounded) -> None:
    server = bounded.server
    limit = bounded.capacity * THRESHOLD_PERCENT // 100
    model_bytes = (bounded.built.folders[A] / "model.safetensors").stat().st_size
    texts = random_texts(3, 40, seed=5, numbered=True)
    references = {
        name: reference_embeddings(texts, bounded.built.folders[name], max_length=128) for name in MODELS
    }
    # A is used between every other request: LRU must keep it although it was loaded first.
    order = [A, B, A, C, A, D, A, B, A, C, A, D, A, B]
    last_used: dict[str, int] = {}
    evicted: list[str] = []
    for step, name in enumerate(order):
        before = {n for n, s in states(server).items() if s == "loaded"}
        assert_close(encode_loaded(server, name, texts), references[name])
        last_used[name] = step
        held = held_bytes(server)
        # Each model counts its parameters (its weight file's size), and together they stay under
        # the threshold: two fit, a third evicts.
        assert all(abs(size - model_bytes) < model_bytes / 100 for size in held.values()), held
        assert sum(held.values()) <= limit and len(held) <= 2, (step, held, limit)
        after = {n for n, s in states(server).items() if s in ("loaded", "unloading")}
        for gone in sorted(before - after):
            # Everything kept (other than the model just loaded) was used after the one evicted.
            kept = after - {name}
            assert all(last_used[k] > last_used[gone] for k in kept), (step, gone, kept, last_used)
            evicted.append(gone)
    assert evicted, "nothing was evicted: the bound is too loose for this test"
    assert A not in evicted
    loads = {name: model_info(server, name)["loads"] for name in MODELS}
    assert loads[A] == 1 and all(loads[n] >= 2 for n in (B, C, D)), loads


def test_a_request_in_flight_during_an_eviction_is_answered(bounded: Bounded) -> None:
    server = bounded.server
    for name in (D, C):
        encode_loaded(server, name, ["warm"])
    big = random_texts(128, 100, seed=9, numbered=True)  # 32 batches of 4: seconds of work for C
    outcome: dict[str, Any] = {}

    def send_big() -> None:
        outcome["response"] = encode(server.url, C, {"items": [{"text": t} for t in big]}, as_json=False)
        outcome["done_s"] = time.monotonic()

    thread = threading.Thread(target=send_big, daemon=True)
    thread.start()
    wait_until(lambda: model_info(server, C)["queue_depth"] > 0, 30, "C's items queued")
    # Loading A and B needs room while C works: C is busy (and used on every batch), D goes.
    started_s = time.monotonic()
    encode_loaded(server, A, ["x"])
    encode_loaded(server, B, ["y"])
    thread.join(120)
    response = outcome["response"]
    assert response.status_code == 200, response.text
    assert outcome["done_s"] > started_s + 0.5, "C finished before the evictions; make its request bigger"
    rows = list(range(0, len(big), 9))  # a sample: the reference runs one text at a time
    reference = reference_embeddings([big[i] for i in rows], bounded.built.folders[C], max_length=128)
    assert_close(dense_matrix(decode(response))[rows], reference)
    assert states(server)[D] in ("available", "unloading")


# -- idle unload and failed loads -----------------------------------------------------------------


def test_an_idle_model_is_unloaded_and_reloads_on_request(lifecycle: tuple[Server, Built]) -> None:
    server, built = lifecycle
    texts = ["idle models go"]
    reference = reference_embeddings(texts, built.folders["tiny/ok"], max_length=128)
    assert_close(encode_loaded(server, "tiny/ok", texts), reference)
    loads = model_info(server, "tiny/ok")["loads"]
    used_s = time.monotonic()
    wait_state(server, "tiny/ok", "available", timeout_s=30)
    assert time.monotonic() - used_s >= 1.9  # not before its idle time
    assert_close(encode_loaded(server, "tiny/ok", texts), reference)
    assert model_info(server, "tiny/ok")["loads"] == loads + 1


def test_a_failed_load_answers_502_for_the_cool_down_then_retries(lifecycle: tuple[Server, Built]) -> None:
    server, built = lifecycle
    name = "tiny/broken"
    body = {"items": [{"text": "x"}]}
    first = encode(server.url, name, body, as_json=True)
    assert (first.status_code, first.json()["detail"]["code"]) == (503, "MODEL_LOADING")
    info = wait_state(server, name, "failed", timeout_s=30)
    assert info["last_error"]["code"] == "MODEL_LOAD_FAILED" and info["last_error"]["message"]
    failed_s = time.monotonic()
    refused = encode(server.url, name, body, as_json=True)
    assert (refused.status_code, refused.json()["detail"]["code"]) == (502, "MODEL_LOAD_FAILED")
    # Repair the weights meanwhile; the retry after the cool-down must load them.
    good = make_dense(built.models_dir.parent / "good", seed=7)
    shutil.copy(good / "model.safetensors", built.folders[name] / "model.safetensors")

    def retried() -> bool:
        response = encode(server.url, name, body, as_json=True)
        if response.status_code == 502:
            return False
        assert (response.status_code, response.json()["detail"]["code"]) == (503, "MODEL_LOADING")
        return True

    wait_until(retried, 30, "the load is retried after the cool-down", interval_s=0.2)
    assert time.monotonic() - failed_s >= 2.5
    wait_state(server, name, "loaded")
    assert model_info(server, name)["last_error"] is None
    reference = reference_embeddings(["x"], good, max_length=128)
    assert_close(encode_loaded(server, name, ["x"]), reference)
