"""Models directory and cluster cache on object storage, end to end: real servers reading their
catalog from a bucket and copying Hugging Face snapshots from another prefix of it into an empty
local cache, against stores on loopback started here, each behind a TCP proxy that counts requests
and can slow or cut replies.

Two servers: `shared` on GCS (an emulator), two CPU devices (one copy when both want a model);
`small` on S3 (moto's server), one device with a disk cache of a few megabytes (eviction, a copy
killed part way, a network cut). Every model is the same tiny BERT under its own repository id, so
each vector served is checked against the model served from its local folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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

from tests.integration.balancer import tiny_models_dir
from tests.integration.server import REPO, Server, shm_names, wait_until
from tests.object_stores import GcsEmulator, MotoS3, Proxy, upload_snapshot

pytestmark = pytest.mark.slow

TEXT = "A man is eating food."
LOCAL = "tiny/local"  # served from its folder: the reference for every copy
SIE_FORMAT = "tiny/sie"  # an SIE YAML file in the bucket
SHARED, SMALL = "gs", "s3"  # each server's store
IN_CLUSTER = (
    "tiny/hit",
    "tiny/pair",
    "tiny/pre",
    SIE_FORMAT,
    "tiny/big1",
    "tiny/big2",
    "tiny/killed",
    "tiny/cut",
)


@dataclass
class Cloud:
    moto: MotoS3  # the shared server's store
    gcs: GcsEmulator  # the small server's
    proxies: dict[str, Proxy]  # scheme -> the proxy in front of its store
    buckets: dict[str, str]  # scheme -> bucket
    commits: dict[str, dict[str, str]]  # scheme -> hf_id -> commit
    weights: Path
    root: Path

    def gets(self, scheme: str, hf_id: str, name: str = "model.safetensors") -> int:
        """GET requests the store answered for one file of the model's snapshot (its object name is
        in the request path: after the bucket for S3, after `/o/` for GCS)."""
        repo = "models--" + hf_id.replace("/", "--")
        return self.proxies[scheme].gets(f"hub/{repo}/snapshots/{self.commits[scheme][hf_id]}/{name}")


def _yaml(sie_id: str, folder: Path | None = None) -> str:
    description = {
        "sie_id": sie_id,
        **({"weights": {"path": str(folder)}} if folder else {"hf_id": sie_id}),
        "tasks": {"encode": {"dense": {"dim": 32}}},
        "max_sequence_length": 128,
        "adapter": "dense",
    }
    return yaml.safe_dump(description)


def _sie_yaml(sie_id: str) -> str:
    profile = {"adapter_path": "sie_server.adapters.bert_flash:BertFlashAdapter", "max_batch_tokens": 4096}
    return yaml.safe_dump(
        {
            "sie_id": sie_id,
            "hf_id": sie_id,
            "tasks": {"encode": {"dense": {"dim": 32}}},
            "profiles": {"default": profile},
        }
    )


def _fill(fs: Any, bucket: str, weights: Path, broken: Path) -> dict[str, str]:
    """`models/`: a YAML file per model (SIE's format for one); `hub/`: their snapshots."""
    commits = {hf_id: upload_snapshot(fs, f"{bucket}/hub", hf_id, weights) for hf_id in IN_CLUSTER}
    upload_snapshot(fs, f"{bucket}/hub", "tiny/broken", broken)
    for sie_id in (*IN_CLUSTER, "tiny/absent", "tiny/broken"):
        text = _sie_yaml(sie_id) if sie_id == SIE_FORMAT else _yaml(sie_id)
        fs.pipe_file(f"{bucket}/models/{sie_id.replace('/', '__')}.yaml", text.encode())
    fs.pipe_file(f"{bucket}/models/tiny__local.yaml", _yaml(LOCAL, weights).encode())
    return commits


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    root = tmp_path_factory.mktemp("cloud")
    weights = tiny_models_dir(root, [LOCAL]).parent / "weights"
    broken = root / "broken"  # a sharded snapshot whose index names a shard the bucket lacks
    broken.mkdir()
    (broken / "model.safetensors.index.json").write_text(
        '{"weight_map": {"w": "model-00001-of-00002.safetensors"}}'
    )
    moto, gcs = MotoS3(), GcsEmulator()
    proxies = {"s3": Proxy(moto.port), "gs": Proxy(gcs.port)}
    buckets = {"s3": moto.bucket(), "gs": gcs.bucket()}
    commits = {
        "s3": _fill(moto.fs(), buckets["s3"], weights, broken),
        "gs": _fill(gcs.fs(), buckets["gs"], weights, broken),
    }
    yield Cloud(moto, gcs, proxies, buckets, commits, weights, root)
    for proxy in proxies.values():
        proxy.close()
    gcs.stop()
    moto.stop()


def _start(cloud: Cloud, scheme: str, name: str, *args: str) -> Server:
    env = (
        cloud.moto.env(cloud.proxies["s3"].url)
        if scheme == "s3"
        else {**cloud.gcs.env(), "STORAGE_EMULATOR_HOST": cloud.proxies["gs"].url}
    )
    bucket = cloud.buckets[scheme]
    return Server(
        "--models-dir",
        f"{scheme}://{bucket}/models/",
        "--cluster-cache",
        f"{scheme}://{bucket}/hub",
        "--local-cache",
        str(cloud.root / name / "cache"),
        "--load-failure-cooldown-s",
        "0.5",
        *args,
        frontends=1,
        env=env,
    )


@pytest.fixture(scope="module")
def shared(cloud: Cloud) -> Iterator[Server]:
    server = _start(cloud, SHARED, "shared", "--device", "cpu,cpu", "--preload", f"{LOCAL},tiny/pre")
    try:
        yield server.wait_ready(120)
    finally:
        assert server.stop() == 0, server.log()
        assert shm_names(server.instance) == []


@pytest.fixture(scope="module")
def small(cloud: Cloud) -> Iterator[Server]:
    size = sum(p.stat().st_size for p in cloud.weights.rglob("*") if p.is_file())
    capacity = int(size * 1.6)  # one model fits under 85 % of it, two do not
    server = _start(
        cloud,
        SMALL,
        "small",
        "--preload",
        LOCAL,
        "--idle-evict-s",
        "1",
        "--disk-cache-enabled",
        "true",
        "--local-cache-bytes",
        str(capacity),
    )
    try:
        yield server.wait_ready(120)
    finally:
        assert server.stop() == 0, server.log()
        assert shm_names(server.instance) == []


def encode(server: Server, model: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/encode/{model}",
        json={"items": [{"text": TEXT}]},
        headers={"accept": "application/json"},
        timeout=60,
    )


def vector(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["items"][0]["dense"]["values"], np.float32)


def served(server: Server, model: str, timeout_s: float = 60.0) -> np.ndarray:
    """Ask until the model answers; meanwhile only 503 MODEL_LOADING with Retry-After is allowed."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = encode(server, model)
        if response.status_code == 200:
            return vector(response)
        assert response.status_code == 503, response.text
        assert response.json()["detail"]["code"] == "MODEL_LOADING" and response.headers["retry-after"]
        assert time.monotonic() < deadline, f"{model} not served in {timeout_s} s:\n{server.log()}"
        time.sleep(0.1)


def state(server: Server, model: str) -> str:
    return httpx.get(f"{server.url}/v1/models/{model}", timeout=10).json()["state"]


def snapshot_dir(server_cache: Path, hf_id: str) -> Path:
    return server_cache / f"models--{hf_id.replace('/', '--')}" / "snapshots"


def idle(server: Server, model: str) -> None:
    """Wait until the model is unloaded (--idle-evict-s): its cached files may then be evicted."""
    wait_until(lambda: state(server, model) == "available", 30, f"{model} unloaded when idle")


def answering(server: Server) -> np.ndarray:
    """The reference vector, once the server answers again (after a device restart)."""
    wait_until(lambda: encode(server, LOCAL).status_code == 200, 60, "the device back")
    return vector(encode(server, LOCAL))


# -- the shared server -------------------------------------------------------------------------------
def test_the_catalog_comes_from_the_bucket_in_both_formats(shared: Server) -> None:
    models = {m["name"]: m for m in httpx.get(f"{shared.url}/v1/models", timeout=10).json()["models"]}
    assert {*IN_CLUSTER, LOCAL, "tiny/absent", "tiny/broken"} <= set(models)
    assert models[SIE_FORMAT]["supported"] and models[SIE_FORMAT]["dims"] == {"dense": 32}


def test_a_cluster_cache_hit_is_copied_then_served(cloud: Cloud, shared: Server) -> None:
    reference = vector(encode(shared, LOCAL))
    first = encode(shared, "tiny/hit")
    assert first.status_code == 503 and first.json()["detail"]["code"] == "MODEL_LOADING"
    np.testing.assert_allclose(served(shared, "tiny/hit"), reference, atol=1e-6)
    np.testing.assert_allclose(served(shared, SIE_FORMAT), reference, atol=1e-6)
    cache = cloud.root / "shared" / "cache"
    commit = cloud.commits[SHARED]["tiny/hit"]
    assert [p.name for p in snapshot_dir(cache, "tiny/hit").iterdir()] == [commit]
    assert (cache / "models--tiny--hit" / "refs" / "main").read_text() == commit
    assert cloud.gets(SHARED, "tiny/hit") == 1


def test_two_devices_preloading_one_model_copy_it_once(cloud: Cloud, shared: Server) -> None:
    assert cloud.gets(SHARED, "tiny/pre") == 1
    info = httpx.get(f"{shared.url}/v1/models/tiny/pre", timeout=10).json()
    assert info["state"] == "loaded" and info["device"] == "cpu:0,cpu:1", info


def test_concurrent_first_requests_copy_once(cloud: Cloud, shared: Server) -> None:
    reference = vector(encode(shared, LOCAL))
    results: list[np.ndarray] = []
    callers = [threading.Thread(target=lambda: results.append(served(shared, "tiny/pair"))) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(results) == 4
    for result in results:
        np.testing.assert_allclose(result, reference, atol=1e-6)
    assert cloud.gets(SHARED, "tiny/pair") == 1


def failure(server: Server, model: str) -> str:
    """The message of the model's 502 MODEL_LOAD_FAILED, once its load failed."""

    def failed() -> str | None:
        response = encode(server, model)
        return response.json()["detail"]["message"] if response.status_code == 502 else None

    return wait_until(failed, 60, f"{model}'s load failed")


def test_a_model_in_no_cache_fails_with_the_reason(shared: Server) -> None:
    message = failure(shared, "tiny/absent")
    assert "in neither the local cache" in message and "--hf-fallback" in message
    assert "lacks files its model.safetensors.index.json names" in failure(shared, "tiny/broken")
    assert encode(shared, "tiny/hit").status_code == 200  # the others keep serving


def test_sighup_rereads_the_bucket(cloud: Cloud, shared: Server) -> None:
    fs = cloud.gcs.fs()
    fs.pipe_file(
        f"{cloud.buckets[SHARED]}/models/tiny__added.yaml", _yaml("tiny/added", cloud.weights).encode()
    )
    time.sleep(2.5)  # past a local watcher's period: a bucket is never polled
    assert encode(shared, "tiny/added").status_code == 404
    shared.process.send_signal(signal.SIGHUP)
    wait_until(lambda: encode(shared, "tiny/added").status_code != 404, 30, "the model added on SIGHUP")
    served(shared, "tiny/added")


def test_a_models_url_that_cannot_be_read_stops_the_start(cloud: Cloud, tmp_path: Path) -> None:
    (tmp_path / "s3fs.py").write_text("raise ImportError('not installed')\n")  # an install without sie[cloud]
    cases = [
        (f"s3://{cloud.buckets['s3']}/no-such-prefix/", {}, "does not exist"),
        (
            f"s3://{cloud.buckets['s3']}/models/tiny__local.yaml",
            {},
            "is a file, not a directory of YAML files",
        ),
        (f"s3://{cloud.buckets['s3']}/models/", {"PYTHONPATH": str(tmp_path)}, "pip install 'sie[cloud]'"),
    ]
    for url, extra, reason in cases:
        env = {**os.environ, **cloud.moto.env(), **extra}
        argv = [sys.executable, "-m", "sie", "serve", "--models-dir", url, "--port", "0"]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)
        assert done.returncode == 2 and reason in done.stderr, (url, done.stderr)


# -- the small server ---------------------------------------------------------------------------------
def test_a_full_disk_evicts_the_least_recently_used_model_then_copies(cloud: Cloud, small: Server) -> None:
    cache = cloud.root / "small" / "cache"
    reference = vector(encode(small, LOCAL))
    np.testing.assert_allclose(served(small, "tiny/big1"), reference, atol=1e-6)
    idle(small, "tiny/big1")
    np.testing.assert_allclose(served(small, "tiny/big2"), reference, atol=1e-6)
    assert not (cache / "models--tiny--big1").exists()  # evicted to make room
    assert snapshot_dir(cache, "tiny/big2").is_dir()
    assert "evicting cached model from disk" in small.log()


def _copying_pid(server: Server, part: Path) -> int | None:
    """The device process with `part` open (the file a copy writes), if any."""
    for pid in server.roles()["device"]:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(part) for fd in os.listdir(f"/proc/{pid}/fd")):
                return pid
        except OSError:
            continue
    return None


def test_a_copy_killed_part_way_is_never_used_and_the_next_load_finishes_it(
    cloud: Cloud, small: Server
) -> None:
    cache = cloud.root / "small" / "cache"
    incoming = cache / ".sie" / "incoming" / f"models--tiny--killed--{cloud.commits[SMALL]['tiny/killed']}"
    part = incoming / "model.safetensors.part"
    idle(small, "tiny/big2")
    cloud.proxies[SMALL].rate = 1e6  # bytes per second: a copy of a few seconds

    def copying() -> int | None:  # the weights part-way, the tokenizer whole
        if not ((incoming / "tokenizer.json").exists() and part.exists() and part.stat().st_size > 0):
            return None
        return _copying_pid(small, part)

    try:
        assert encode(small, "tiny/killed").status_code == 503
        os.kill(wait_until(copying, 30, "the copy under way"), signal.SIGKILL)
    finally:
        cloud.proxies[SMALL].rate = None
    assert not snapshot_dir(cache, "tiny/killed").exists()  # nothing half-copied is where a lookup looks
    reference = answering(small)
    np.testing.assert_allclose(served(small, "tiny/killed"), reference, atol=1e-6)
    assert not incoming.exists()
    # The whole files of the killed copy were kept: tokenizer.json came once.
    assert cloud.gets(SMALL, "tiny/killed", "tokenizer.json") == 1


def test_a_network_cut_mid_copy_fails_the_load_and_a_later_one_resumes(cloud: Cloud, small: Server) -> None:
    idle(small, "tiny/killed")
    cloud.proxies[SMALL].cut_after = 200_000  # each connection stops after 200 kB: retries cannot finish
    try:
        assert "the next load resumes it" in failure(small, "tiny/cut")
        assert not snapshot_dir(cloud.root / "small" / "cache", "tiny/cut").exists()
    finally:
        cloud.proxies[SMALL].cut_after = None
    wait_until(lambda: encode(small, "tiny/cut").status_code != 502, 10, "the failure's cool-down over")
    np.testing.assert_allclose(served(small, "tiny/cut"), vector(encode(small, LOCAL)), atol=1e-6)
