"""Operating a real server the way an SRE would: configured from an SIE environment file, behind
bearer tokens, under systemd's notify protocol, on two CPU devices, logging JSON, scraped by
Prometheus, with weights from a local Hugging Face cache; and stopped with a client stuck mid-upload.

One server for the whole module (tests run in file order; the last one stops it).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import psutil
import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from sie.frontend.exposition import ServerCollector, Sources
from sie.shm.control import ModelState
from tests.integration import dashboard
from tests.integration.balancer import tiny_models_dir
from tests.integration.reference import reference_embeddings
from tests.integration.server import REPO, STOP_LIMIT_S, Server, shm_names, wait_until
from tests.integration.texts import assert_close
from tests.metrics.blocks import made_blocks

pytestmark = pytest.mark.slow

MODEL = "tiny/ops"
CACHED = "tiny/cached"  # hf_id only: found in SIE_LOCAL_CACHE
MISSING = "tiny/missing"  # hf_id only: in no cache, and the Hub is not allowed
ENV_TOKEN, FILE_TOKEN = "env-token-1", "file-token-2"
SDK_PYTHON = REPO / ".venv-sdk" / "bin" / "python"
SCRAPE_LABELS = {"instance", "job"}  # what Prometheus adds to every series it scrapes
SAMPLE_SUFFIXES = {  # a family's sample names on the page, by its type
    "counter": lambda name: [f"{name}_total"],
    "gauge": lambda name: [name],
    "histogram": lambda name: [f"{name}_bucket", f"{name}_count", f"{name}_sum"],
}


@dataclass
class Ops:
    server: Server
    weights: Path
    notify: socket.socket
    messages: list[str]

    def notices(self, timeout_s: float = 0.2) -> list[str]:
        """Everything sent to NOTIFY_SOCKET so far (waiting up to `timeout_s` for more)."""
        self.notify.settimeout(timeout_s)
        try:
            while True:
                self.messages.append(self.notify.recv(4096).decode())
        except TimeoutError:
            pass
        return self.messages

    def auth(self, token: str = ENV_TOKEN) -> dict[str, str]:
        return {"authorization": f"Bearer {token}", "accept": "application/json"}


def local_cache(root: Path, weights: Path) -> Path:
    """A Hugging Face hub cache holding `tiny/cached` the way huggingface_hub lays it out."""
    repo = root / "hub" / "models--tiny--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    shutil.copytree(weights, repo / "snapshots" / "0123abcd")
    return root


@pytest.fixture(scope="module")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    root = tmp_path_factory.mktemp("ops")
    models = tiny_models_dir(root, [MODEL])
    weights = root / "weights"
    for sie_id in (CACHED, MISSING):
        description = {
            "sie_id": sie_id,
            "hf_id": sie_id,
            "tasks": {"encode": {"dense": {"dim": 32}}},
            "max_sequence_length": 128,
            "adapter": "dense",
        }
        (models / f"{sie_id.replace('/', '__')}.yaml").write_text(yaml.safe_dump(description))
    (root / "tokens").write_text(f"# operators\n{FILE_TOKEN}\n")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(root / "notify.sock"))
    env = {  # an SIE operator's environment file, SIE's names where SIE has them
        "SIE_MODELS_DIR": str(models),
        "SIE_MODEL_FILTER": f"{MODEL},{CACHED},{MISSING}",
        "SIE_PRELOAD_MODELS": f"{MODEL},{CACHED}",
        "SIE_DEVICE": "cpu,cpu",
        "SIE_LOG_JSON": "true",
        "SIE_INSTRUMENTATION": "true",
        "SIE_LOCAL_CACHE": str(local_cache(root / "cache", weights)),
        "SIE_AUTH_TOKEN": ENV_TOKEN,
        "SIE_AUTH_TOKEN_FILE": str(root / "tokens"),
        "SIE_TELEMETRY_DISABLED": "true",
        "SIE_NO_SUCH_SETTING": "1",
        "NOTIFY_SOCKET": str(root / "notify.sock"),
    }
    # Server() passes `--device cpu`; the environment must win here, so the flag is given again.
    server = Server("--device", "cpu,cpu", frontends=1, env={**env, "SIE_DEVICE": "cpu,cpu"})
    made = Ops(server, weights, notify, [])
    try:
        server.wait_ready(180)
        yield made
    finally:
        if server.process.poll() is None:
            server.stop()
        notify.close()


def scrape(ops: Ops) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"{ops.server.url}/metrics", timeout=30)  # open: no token needed
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def metric(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric_name: str, **labels: str
) -> float:
    """The one sample of `metric_name` whose labels include `labels` (0 when there is none)."""
    found = [v for (n, have), v in samples.items() if n == metric_name and set(labels.items()) <= set(have)]
    assert len(found) <= 1, (metric_name, labels, found)
    return found[0] if found else 0.0


def encode(ops: Ops, model: str, texts: list[str], token: str = ENV_TOKEN) -> httpx.Response:
    body = {"items": [{"text": t} for t in texts]}
    return httpx.post(f"{ops.server.url}/v1/encode/{model}", json=body, headers=ops.auth(token), timeout=60)


def test_systemd_hears_ready_once_preloads_are_loaded(ops: Ops) -> None:
    notices = ops.notices(timeout_s=2.0)
    assert any(n.startswith("READY=1") for n in notices), notices
    assert httpx.get(f"{ops.server.url}/readyz", timeout=10).status_code == 200
    assert not any("STOPPING=1" in n for n in notices)


def test_every_api_route_needs_a_token_and_probes_do_not(ops: Ops) -> None:
    url = ops.server.url
    refused = httpx.post(f"{url}/v1/encode/{MODEL}", json={"items": [{"text": "hi"}]}, timeout=30)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert refused.json() == {
        "detail": {"code": "UNAUTHORIZED", "message": refused.json()["detail"]["message"]}
    }
    assert (
        httpx.get(f"{url}/v1/models", headers={"authorization": "Bearer wrong"}, timeout=30).status_code
        == 401
    )
    for token in (ENV_TOKEN, FILE_TOKEN):
        assert encode(ops, MODEL, ["hi"], token).status_code == 200
    for path in ("/healthz", "/livez", "/readyz", "/metrics"):
        assert httpx.get(url + path, timeout=30).status_code == 200, path
    version = httpx.get(f"{url}/version", headers=ops.auth(), timeout=30)
    assert version.json()["sie_protocol_version"] == "0.10.1"
    assert version.headers["server"] == f"sie/{version.json()['version']}"


def test_two_cpu_devices_share_the_work_and_agree(ops: Ops) -> None:
    texts = [f"sentence number {i} about a device" for i in range(24)]
    reference = reference_embeddings(texts, ops.weights, max_length=128)
    before = scrape(ops)
    results: dict[int, np.ndarray] = {}

    def send(i: int) -> None:
        response = encode(ops, MODEL, texts[i : i + 1])
        assert response.status_code == 200, response.text
        results[i] = np.array(response.json()["items"][0]["dense"]["values"], np.float32)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == list(range(len(texts)))
    assert_close(np.stack([results[i] for i in range(len(texts))]), reference)
    after = scrape(ops)
    per_device = [
        metric(after, "sie_batch_size_sum", device=d, model=MODEL)
        - metric(before, "sie_batch_size_sum", device=d, model=MODEL)
        for d in ("0", "1")
    ]
    assert sum(per_device) == len(texts) and min(per_device) > 0, per_device


def test_metrics_show_the_whole_server(ops: Ops) -> None:
    before = scrape(ops)
    for _ in range(3):
        assert encode(ops, MODEL, ["one", "two"]).status_code == 200
    assert httpx.post(f"{ops.server.url}/v1/encode/{MODEL}", json={}, timeout=30).status_code == 401
    after = scrape(ops)

    def grew(metric_name: str, **labels: str) -> float:
        return metric(after, metric_name, **labels) - metric(before, metric_name, **labels)

    assert grew("sie_requests_total", route="encode", model=MODEL, status="200") == 3
    assert grew("sie_requests_total", route="encode", model="", status="401") == 1
    assert grew("sie_errors_total", model="", code="UNAUTHORIZED") == 1
    assert grew("sie_items_total", model=MODEL) == 6
    assert grew("sie_tokens_total", model=MODEL) == 6 * 3  # [CLS] word [SEP]
    for stage in ("queue", "tokenization", "inference", "postprocessing", "total"):
        assert grew("sie_request_stage_seconds_count", stage=stage, model=MODEL) == 3, stage
    for device in ("0", "1"):
        for model in (MODEL, CACHED):
            assert metric(after, "sie_model_state", device=device, model=model, state="loaded") == 1
            assert metric(after, "sie_model_loads_total", device=device, model=model) == 1
            assert metric(after, "sie_model_load_seconds_total", device=device, model=model) > 0
        assert metric(after, "sie_device_up", device=device) == 1
        assert metric(after, "sie_device_memory_total_bytes", device=device) > 0
        assert metric(after, "sie_process_resident_memory_bytes", role="device", index=device) > 50e6
        assert metric(after, "sie_device_restarts_total", device=device) == 0
    assert metric(after, "sie_model_state", device="0", model=MISSING, state="available") == 1
    assert metric(after, "sie_process_resident_memory_bytes", role="supervisor", index="0") > 0
    assert metric(after, "sie_process_resident_memory_bytes", role="frontend", index="0") > 0
    assert metric(after, "sie_ring_capacity_bytes", direction="request") > 0


def test_openmetrics_page_parses_with_a_real_parser(ops: Ops) -> None:
    accept = "application/openmetrics-text; version=1.0.0"
    response = httpx.get(f"{ops.server.url}/metrics", headers={"accept": accept}, timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    families = list(openmetrics_families(response.text))  # raises on anything OpenMetrics does not allow
    types = {family.name: family.type for family in families}
    assert types["sie_requests"] == "counter" and types["sie_request_stage_seconds"] == "histogram"
    loaded = [
        s
        for family in families
        for s in family.samples
        if s.name == "sie_model_state" and s.labels["model"] == MODEL and s.labels["state"] == "loaded"
    ]
    assert [s.value for s in loaded] == [1.0, 1.0]  # on both devices


def test_every_dashboard_query_names_what_this_server_exports(ops: Ops) -> None:
    assert encode(ops, MODEL, ["fill the request and batch series"]).status_code == 200
    page = httpx.get(f"{ops.server.url}/metrics", timeout=30).text
    exported = {
        name
        for family in text_string_to_metric_families(page)
        for name in SAMPLE_SUFFIXES[family.type](family.name)
    }
    labels = collector_labels()
    assert set(labels) <= exported  # the same collector: a family the page lacks would be a bug
    queries = dashboard.queries(dashboard.load())
    for query in queries:
        for name, matched in query.selectors:
            assert name in exported, (query.where, name)
            assert matched <= labels[name] | SCRAPE_LABELS, (query.where, name, matched - labels[name])
        for grouped, names in query.groupings:
            have = set().union(*(labels[n] for n in names)) | SCRAPE_LABELS
            assert grouped <= have, (query.where, grouped - have)
        if query.label is not None:
            assert query.label in labels[query.selectors[0][0]] | SCRAPE_LABELS, query
    used = {name for query in queries for name, _ in query.selectors}
    # What the dashboard is for: rates and stage latency, queues, batches and padding, model states
    # and memory, device memory, restarts.
    assert {
        "sie_requests_total",
        "sie_request_stage_seconds_bucket",
        "sie_pending_items",
        "sie_batch_size_bucket",
        "sie_batch_padded_tokens_total",
        "sie_model_state",
        "sie_model_memory_bytes",
        "sie_device_memory_used_bytes",
        "sie_device_restarts_total",
        "sie_frontend_restarts_total",
    } <= used
    titled = [p for p in dashboard.panels(dashboard.load()) if p["type"] != "row"]
    assert len({p["id"] for p in titled}) == len(titled) and all(p.get("targets") for p in titled)


def collector_labels() -> dict[str, set[str]]:
    """Sample name -> its label names, from the collector over blocks where every counter counted."""
    with made_blocks(n_devices=2, n_frontends=1, n_models=2) as blocks:
        for key, values in blocks.stats.v.items():
            if key not in ("header", "pci"):
                values[...] = os.getpid() if key.endswith("pids") or key == "supervisor_pid" else 1
        for slot in (0, 1):
            blocks.control.set_model_state(0, slot, ModelState.LOADED)
            blocks.control.set_model_memory(0, slot, 1 << 20)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ServerCollector(Sources(blocks.stats, blocks.control, ["a", "b"], ["cpu", "cpu"])))
        labels: dict[str, set[str]] = {}
        for family in registry.collect():
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
        return labels


def test_tokens_never_reach_a_child_command_line(ops: Ops) -> None:
    children = psutil.Process(ops.server.process.pid).children(recursive=True)
    lines = {child.pid: " ".join(child.cmdline()) for child in children}
    assert sum(" _device " in line for line in lines.values()) == 2, lines
    assert sum(" _frontend " in line for line in lines.values()) == 1, lines
    for token in (ENV_TOKEN, FILE_TOKEN):
        assert not [pid for pid, line in lines.items() if token in line], (token, lines)
    assert encode(ops, MODEL, ["x"], token=FILE_TOKEN).status_code == 200  # the frontend has them


def test_weights_from_the_local_cache_and_no_hub_without_leave(ops: Ops) -> None:
    texts = ["cached weights", "the same as the folder"]
    cached, direct = encode(ops, CACHED, texts), encode(ops, MODEL, texts)
    assert cached.status_code == direct.status_code == 200
    assert cached.json()["items"] == direct.json()["items"]

    def settled() -> httpx.Response | None:
        response = encode(ops, MISSING, ["x"])
        return response if response.status_code != 503 else None

    failed = wait_until(settled, 60, "the missing model's load failed")
    assert failed.status_code == 502 and failed.json()["detail"]["code"] == "MODEL_LOAD_FAILED"
    message = failed.json()["detail"]["message"]
    assert "not in the local Hugging Face cache" in message and "SIE_HF_FALLBACK" in message


@pytest.mark.skipif(not SDK_PYTHON.exists(), reason=f"{SDK_PYTHON} missing: run scripts/install.sh --test")
def test_real_sdk_and_openai_client_with_a_token(ops: Ops) -> None:
    actions = [{"op": "encode", "model": MODEL, "items": {"text": "hello"}, "kwargs": {}}]
    client = REPO / "tests" / "integration" / "sdk_client.py"

    def run_sdk(*key: str) -> tuple[list[dict[str, Any]], str]:
        done = subprocess.run(
            [str(SDK_PYTHON), str(client), ops.server.url, *key],
            input=json.dumps(actions),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return json.loads(done.stdout), done.stderr

    (good,), stderr = run_sdk(FILE_TOKEN)
    assert good["ok"], good
    assert len(good["result"]["dense"]["values"]) == 32
    assert "version" not in stderr.lower(), stderr  # x-sie-server-version matches the SDK: no skew warning
    (bad,), _ = run_sdk("not-a-token")
    assert not bad["ok"] and bad["error"]["status_code"] == 401, bad
    good_client = openai.OpenAI(base_url=f"{ops.server.url}/v1", api_key=ENV_TOKEN, max_retries=0)
    embedded = good_client.embeddings.create(model=MODEL, input=["hello", "world"])
    assert [len(e.embedding) for e in embedded.data] == [32, 32]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{ops.server.url}/v1", api_key="nope", max_retries=0).embeddings.create(
            model=MODEL, input="hello"
        )


def test_logs_are_json_lines_from_every_process(ops: Ops) -> None:
    lines = [line for line in ops.server.log_path.read_text().splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]  # every line, whoever wrote it
    assert all({"ts", "level", "logger", "role", "pid", "message"} <= set(e) for e in entries)
    assert {"supervisor", "device0", "device1", "frontend0"} <= {e["role"] for e in entries}
    warnings = [e["message"] for e in entries if e["level"] == "warning" and e["role"] == "supervisor"]
    assert "unknown setting SIE_NO_SUCH_SETTING is ignored" in warnings
    assert any("SIE_TELEMETRY_DISABLED" in w for w in warnings)
    batches = [e for e in entries if e["message"] == "batch"]  # SIE_INSTRUMENTATION: one line per batch
    assert batches and all({"items", "tokens", "max_length", "forward_ms"} <= set(e) for e in batches)


def test_stop_is_prompt_with_a_client_stuck_mid_upload(ops: Ops) -> None:
    server = ops.server
    stuck = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    head = (
        f"POST /v1/encode/{MODEL} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ENV_TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    stuck.sendall(head.encode() + b'{"items": [{"text": "')  # and then nothing more
    wait_until(lambda: _in_flight(ops) >= 1, 30, "the stuck request is being read")
    started = time.monotonic()
    code = server.stop()
    took_s = time.monotonic() - started
    answer = stuck.recv(65536)
    stuck.close()
    assert code == 0 and took_s < STOP_LIMIT_S, took_s
    assert answer.split(b"\r\n", 1)[0].split()[1] == b"503"
    assert b"SHUTTING_DOWN" in answer
    assert any("STOPPING=1" in n for n in ops.notices(timeout_s=1.0))
    assert shm_names(server.instance) == []


def _in_flight(ops: Ops) -> float:
    return metric(scrape(ops), "sie_requests_in_flight")
