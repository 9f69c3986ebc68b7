"""Two sie servers behind HAProxy (the shipped deploy/haproxy.cfg) on loopback.

The tests run in file order on one cluster, each starting from where the previous one left it:
stickiness, SIGKILL of one server under load, its restart, overload, and a drain. Overload comes
before the drain because it needs both servers: the drain ends one of them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.integration.balancer import (
    SHIPPED_CONFIG,
    Call,
    Haproxy,
    Load,
    call,
    error_code,
    failures,
    find_binary,
    tiny_models_dir,
)
from tests.integration.server import REPO, Server, shm_names

pytestmark = [pytest.mark.slow, pytest.mark.balancer]

NGINX_CONFIG = REPO / "deploy" / "nginx.conf"
MODELS = [f"tiny/model-{i}" for i in range(6)]
QUEUE_CAP = 2  # the restarted server's --max-concurrent-requests, for the overload test
DRAIN_DELAY_S = 4.0  # > fall 2 x inter 300 ms + a check in flight, with room for a busy box
NO_HAPROXY = (
    "haproxy is not installed; `bash scripts/install.sh --test` installs Debian's package when run as "
    "root where apt-get exists"
)


@dataclass
class Cluster:
    lb: Haproxy
    servers: dict[str, Server]  # HAProxy's server name -> the sie server behind it
    models_dir: Path
    home: dict[str, str] = field(default_factory=dict)  # model -> X-SIE-Instance, from the first test

    def instance(self, name: str) -> str:
        return f"{self.servers[name].instance}@{os.uname().nodename}"

    def models_on(self, name: str) -> list[str]:
        return [m for m, home in self.home.items() if home == self.instance(name)]

    def listed(self, name: str) -> dict[str, dict[str, object]]:
        listed = httpx.get(self.servers[name].url + "/v1/models", timeout=10).json()["models"]
        return {m["name"]: m for m in listed}

    def loaded(self, name: str) -> set[str]:
        return {m for m, info in self.listed(name).items() if info["state"] == "loaded"}


def start(models_dir: Path, *args: str, instance: str | None = None, port: int | None = None) -> Server:
    """A server in a process group of its own (so it can be SIGKILLed whole), with one frontend."""
    argv = ("--models-dir", str(models_dir), *args)
    return Server(*argv, frontends=1, own_group=True, instance=instance, port=port)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    binary = find_binary("haproxy")
    if binary is None:
        pytest.skip(NO_HAPROXY)
    root = tmp_path_factory.mktemp("balancer")
    models_dir = tiny_models_dir(root, MODELS)
    servers = {"gpu-a": start(models_dir), "gpu-b": start(models_dir, "--drain-delay-s", str(DRAIN_DELAY_S))}
    lb: Haproxy | None = None
    try:
        for server in servers.values():
            server.wait_ready()
        lb = Haproxy(binary, {name: s.port for name, s in servers.items()}, root)
        for name in servers:
            lb.wait_state(name, "UP", 30)
        yield Cluster(lb, servers, models_dir)
    finally:
        if lb is not None:
            lb.stop()
        for server in servers.values():
            server.stop()


def warm(cluster: Cluster, models: list[str]) -> list[Call]:
    """First requests in parallel: each cold load answers 503 MODEL_LOADING, Retry-After 5, once."""
    with httpx.Client(timeout=60) as client, ThreadPoolExecutor(len(models)) as pool:
        calls = list(pool.map(lambda m: call(client, cluster.lb.url, m, "warm up"), models))
    assert failures(calls) == [], [(c.model, c.attempts, c.error) for c in failures(calls)]
    return calls


def where_each_model_lands(cluster: Cluster, rounds: int = 4) -> dict[str, set[str]]:
    landed: dict[str, set[str]] = {m: set() for m in MODELS}
    with httpx.Client(timeout=30) as client:
        for n in range(rounds):
            for model in MODELS:
                done = call(client, cluster.lb.url, model, f"round {n}", openai=n % 2 == 1)
                assert done.status == 200, (model, done.attempts, done.error)
                landed[model].add(done.instance)
    return landed


def test_haproxy_accepts_the_shipped_config(tmp_path: Path) -> None:
    binary = find_binary("haproxy")
    if binary is None:
        pytest.skip(NO_HAPROXY)
    checked = subprocess.run([binary, "-c", "-f", str(SHIPPED_CONFIG)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_nginx_accepts_the_shipped_config(tmp_path: Path) -> None:
    binary = find_binary("nginx")
    if binary is None:
        pytest.skip("nginx is not installed (the alternative config is checked where it is)")
    # The shipped file holds http-context directives; wrap it the way conf.d/ includes it.
    temp = {d: tmp_path / d for d in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")}
    wrapper = tmp_path / "nginx.conf"
    wrapper.write_text(
        f"error_log {tmp_path}/error.log;\npid {tmp_path}/nginx.pid;\nevents {{}}\nhttp {{\n"
        + "".join(f"    {d}_temp_path {p};\n" for d, p in temp.items())
        + f"    access_log off;\n    include {NGINX_CONFIG};\n}}\n"
    )
    checked = subprocess.run(
        [binary, "-t", "-p", str(tmp_path), "-c", str(wrapper)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_each_model_sticks_to_one_instance(cluster: Cluster) -> None:
    warm(cluster, MODELS)
    landed = where_each_model_lands(cluster)  # via /v1/encode/{model} and /v1/embeddings alike
    assert all(len(instances) == 1 for instances in landed.values()), landed
    cluster.home = {m: next(iter(instances)) for m, instances in landed.items()}
    assert set(cluster.home.values()) == {cluster.instance("gpu-a"), cluster.instance("gpu-b")}
    loaded_a, loaded_b = cluster.loaded("gpu-a"), cluster.loaded("gpu-b")
    assert loaded_a.isdisjoint(loaded_b) and loaded_a | loaded_b == set(MODELS)
    assert loaded_a == set(cluster.models_on("gpu-a")) and loaded_b == set(cluster.models_on("gpu-b"))
    for model, home in cluster.home.items():  # "where is X", asked of the balancer
        info = httpx.get(f"{cluster.lb.url}/v1/models/{model}", timeout=10).json()
        assert info["instance"] == home and info["state"] == "loaded" and info["device"] == "cpu"
        assert info["memory_bytes"] > 0 and info["last_used"] > time.time() - 120
        assert info["queue_depth"] == 0


def test_sigkill_one_instance_under_load(cluster: Cluster) -> None:
    victim, survivor = cluster.servers["gpu-a"], cluster.servers["gpu-b"]
    moved = cluster.models_on("gpu-a")
    try:
        with Load(cluster.lb.url, MODELS) as load:
            load.wait_for(lambda calls: len(calls) >= 20, 30, "load is flowing")
            os.killpg(victim.process.pid, signal.SIGKILL)  # the supervisor and its children, at once
            killed_s = time.monotonic()
            victim.process.wait(30)  # reap it first: stop() checks a clean /dev/shm only after a live stop
            victim.stop()  # closes its log
            down_s = cluster.lb.wait_state("gpu-a", "DOWN", 10)

            def moved_models_served(calls: list[Call]) -> bool:
                after = [c for c in calls if c.started_s > killed_s]
                return set(moved) <= {c.model for c in after if c.instance == cluster.instance("gpu-b")}

            load.wait_for(moved_models_served, 30, "the killed server's models served by the other")
            time.sleep(1.0)
    finally:  # the tests after this one need gpu-a back, whatever this one finds
        old_pid = victim.process.pid
        cap = ("--max-concurrent-requests", str(QUEUE_CAP))
        restarted = start(cluster.models_dir, *cap, instance=victim.instance, port=victim.port)
        cluster.servers["gpu-a"] = restarted.wait_ready()
    assert [n for n in shm_names(victim.instance) if f".{old_pid}." in n] == []  # swept at start
    assert survivor.process.poll() is None

    calls = load.calls
    # A kill between an answer's header and body writes cuts that answer; nothing else may fail.
    cut = [c for c in calls if c.cut and c.started_s < killed_s]
    assert [c for c in calls if c.error and c not in cut] == [], "the balancer let a transport error through"
    assert len(cut) <= 1, cut
    failed = [c for c in failures(calls) if c not in cut]
    assert failed == [], [(c.model, c.attempts) for c in failed]
    after = [c for c in calls if c.started_s > down_s]
    assert {c.instance for c in after} == {cluster.instance("gpu-b")}
    assert cluster.loaded("gpu-b") == set(MODELS)
    slowest = max(c.ended_s - c.started_s for c in calls)
    print(
        f"\nkill: {len(calls)} calls, {len(cut)} cut mid-answer, 0 other failures; out of rotation "
        f"{down_s - killed_s:.2f} s after SIGKILL; slowest call {slowest:.2f} s"
    )
    assert slowest < 5 + 8  # one Retry-After of a cold load, the load itself, and slack


def test_restarted_instance_gets_its_models_back(cluster: Cluster) -> None:
    cluster.lb.wait_state("gpu-a", "UP", 30)
    warm(cluster, cluster.models_on("gpu-a"))  # cold loads again, on the restarted server
    landed = where_each_model_lands(cluster, rounds=2)
    assert landed == {m: {home} for m, home in cluster.home.items()}
    assert cluster.loaded("gpu-a") == set(cluster.models_on("gpu-a"))


def test_overload_reaches_the_client_and_the_instance_stays_up(cluster: Cluster) -> None:
    model = cluster.models_on("gpu-a")[0]  # gpu-a now runs with a queue cap of QUEUE_CAP items
    body = {"items": [{"text": f"burst item {i}"} for i in range(QUEUE_CAP)]}  # one request fills it
    responses: list[httpx.Response] = []
    states: list[str] = []
    ready: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            states.append(cluster.lb.states()["gpu-a"])
            ready.append(httpx.get(cluster.servers["gpu-a"].url + "/readyz", timeout=5).status_code)
            time.sleep(0.05)

    def burst(_: int) -> list[httpx.Response]:
        with httpx.Client(timeout=30) as client:
            return [client.post(f"{cluster.lb.url}/v1/encode/{model}", json=body) for _ in range(4)]

    # gpu-b holds this model since the kill test; its last use must not move during the burst.
    used_on_b = cluster.listed("gpu-b")[model]["last_used"]
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with ThreadPoolExecutor(16) as pool:
        for batch in pool.map(burst, range(16)):
            responses += batch
    time.sleep(3 * 0.3)  # a few more health checks after the burst
    done.set()
    watcher.join(10)
    full = [r for r in responses if r.status_code == 503]
    assert full, "the burst never filled the queue"
    assert {r.status_code for r in responses} == {200, 503}
    assert all(error_code(r) == "QUEUE_FULL" and r.headers["retry-after"] == "1" for r in full)
    assert {r.headers["x-sie-instance"] for r in responses} == {cluster.instance("gpu-a")}
    assert set(states) == {"UP"} and set(ready) == {200}
    assert cluster.listed("gpu-b")[model]["last_used"] == used_on_b
    print(f"\noverload: {len(full)} of {len(responses)} answered 503 QUEUE_FULL; gpu-a UP throughout")


def test_sigterm_drains_without_failures(cluster: Cluster) -> None:
    leaving = cluster.servers["gpu-b"]
    with Load(cluster.lb.url, MODELS) as load:
        load.wait_for(lambda calls: len(calls) >= 20, 30, "load is flowing")
        leaving.process.send_signal(signal.SIGTERM)
        signalled_s = time.monotonic()
        down_s = cluster.lb.wait_state("gpu-b", "DOWN", 10)
        code = leaving.process.wait(60)
        exited_s = time.monotonic()

        def all_served_by_a(calls: list[Call]) -> bool:
            recent = {c.model for c in calls if c.started_s > exited_s and c.status == 200}
            return recent == set(MODELS)

        load.wait_for(all_served_by_a, 30, "every model served by the remaining server")
    calls = load.calls
    assert code == 0, leaving.log()
    assert [c for c in calls if c.error] == [] and failures(calls) == [], [
        (c.model, c.attempts, c.error) for c in failures(calls)
    ]
    # Out of rotation within the drain delay, so nothing met the drain itself.
    assert down_s - signalled_s < DRAIN_DELAY_S
    assert not [a for c in calls for a in c.attempts if a[3] == "SHUTTING_DOWN"]
    assert shm_names(leaving.instance) == []
    print(
        f"\ndrain: out of rotation {down_s - signalled_s:.2f} s after SIGTERM, exit 0 after "
        f"{exited_s - signalled_s:.2f} s, {len(calls)} calls, 0 failures"
    )
