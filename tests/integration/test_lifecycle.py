"""Start, configure, probe and stop the real server; and the import borders between process kinds."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from sie.settings import Settings, env_name
from tests.integration.reference import MINILM, minilm_dir, reference_embeddings
from tests.integration.server import REPO, Server, cpu_seconds, shm_names, wait_until
from tests.integration.texts import assert_close, random_texts
from tests.integration.wire import decode, dense_matrix, encode

pytestmark = pytest.mark.slow


# -- the CLI -------------------------------------------------------------------------------------------------


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sie", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "COLUMNS": "250", **(env or {})},
    )


def test_help_lists_every_setting_with_its_env_twin() -> None:
    result = run_cli("serve", "--help")
    assert result.returncode == 0, result.stderr
    for field in Settings.__struct_fields__:
        assert f"--{field.replace('_', '-')}" in result.stdout, field
        assert env_name(field) in result.stdout, field
        assert env_name(field) == "SIE_" + field.upper()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--frontends", "0"], {}, "frontends must be at least 1"),
        ([], {"SIE_FRONTENDS": "0"}, "frontends must be at least 1"),
        (["--port", "eighty"], {}, "port"),
        ([], {"SIE_LOG_FORMAT": "xml"}, "log_format"),
        (["--max-concurrent-requests", "0"], {}, "limits must be positive"),
        (["--device", "tpu"], {}, "unknown device 'tpu'"),
        (["--preload", "foo/bar"], {}, "foo/bar"),
        (["--models-dir", "/nonexistent/models"], {}, "/nonexistent/models"),
        (["--no-such-flag", "1"], {}, "unrecognized arguments"),
    ],
    ids=[
        "frontends-flag",
        "frontends-env",
        "port",
        "log-format-env",
        "limits",
        "device",
        "preload",
        "models-dir",
        "unknown-flag",
    ],
)
def test_invalid_setting_exits_2_with_a_message(args: list[str], env: dict[str, str], message: str) -> None:
    instance = f"bad{os.getpid()}"
    result = run_cli("serve", "--instance", instance, "--port", "0", *args, env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert shm_names(instance) == []


# -- a server configured through flag and environment at once ---------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    started = Server(frontends=2, env={"SIE_FRONTENDS": "1", "SIE_MAX_BATCH_REQUESTS": "32"}).wait_ready()
    yield started
    started.stop()


def test_flag_beats_environment(server: Server) -> None:
    assert len(server.roles()["frontend"]) == 2
    assert len(server.roles()["device"]) == 1


def test_probes_are_plain_text_ok(server: Server) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        response = httpx.get(server.url + path, timeout=10)
        assert (response.status_code, response.text) == (200, "ok"), path
        assert response.headers["content-type"].startswith("text/plain"), path


@dataclass
class Outcome:
    sent_s: float
    response: httpx.Response | None = None
    error: Exception | None = None
    done_s: float = 0.0


def test_sigterm_under_load_finishes_in_flight_and_exits_clean(server: Server) -> None:
    texts = random_texts(16, 60, seed=21, numbered=True)
    reference = reference_embeddings(texts, minilm_dir())
    (device,) = server.roles()["device"]

    def body_for(index: int) -> tuple[list[int], dict[str, object]]:
        picked = [(index * 3 + k) % len(texts) for k in range(len(texts))]
        return picked, {"items": [{"text": texts[i]} for i in picked]}

    outcomes: list[tuple[list[int], Outcome]] = []
    lock = threading.Lock()

    def send(index: int) -> None:
        picked, body = body_for(index)
        outcome = Outcome(time.monotonic())
        with lock:
            outcomes.append((picked, outcome))
        try:
            outcome.response = encode(server.url, MINILM, body, as_json=False, timeout=60)
        except httpx.TransportError as exc:
            outcome.error = exc
        outcome.done_s = time.monotonic()

    busy_before = cpu_seconds(device)
    early = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(6)]
    for thread in early:
        thread.start()
    wait_until(lambda: cpu_seconds(device) > busy_before + 0.3, 60, "device busy with the load")
    server.process.send_signal(signal.SIGTERM)
    signalled_s = time.monotonic()

    stop_late = threading.Event()

    def send_late() -> None:
        index = 100
        while not stop_late.is_set() and server.process.poll() is None:
            send(index)
            index += 1

    late = threading.Thread(target=send_late, daemon=True)
    late.start()
    for thread in early:
        thread.join(60)
        assert not thread.is_alive(), "an in-flight request hangs after SIGTERM"
    code = server.process.wait(60)
    stop_late.set()
    late.join(60)
    assert not late.is_alive()
    assert code == 0, server.log()

    before = [(picked, o) for picked, o in outcomes if o.sent_s < signalled_s]
    after = [(picked, o) for picked, o in outcomes if o.sent_s >= signalled_s]
    assert len(before) == 6
    for picked, outcome in before:
        assert outcome.error is None, (outcome.sent_s - signalled_s, outcome.error)
        assert outcome.response is not None and outcome.response.status_code == 200, outcome.response
        assert_close(dense_matrix(decode(outcome.response)), reference[picked])
    assert after, "no request was sent while draining"
    for picked, outcome in after:
        if outcome.error is not None:
            continue  # refused or reset: never accepted, never answered wrongly
        response = outcome.response
        assert response is not None
        if response.status_code == 200:
            assert_close(dense_matrix(decode(response)), reference[picked])
        else:
            assert response.status_code == 503, response.text
            assert response.json()["detail"]["code"] == "SHUTTING_DOWN"
            assert response.headers["retry-after"] == "5"
    assert shm_names(server.instance) == []


def test_request_sent_while_draining_is_turned_away_promptly() -> None:
    server = Server(frontends=1).wait_ready()
    try:
        (device,) = server.roles()["device"]
        # Seconds of work in flight, so "answered before the drain ended" has a wide margin on a slow box.
        body = {"items": [{"text": t} for t in random_texts(64, 60, seed=22, numbered=True)]}
        busy_before = cpu_seconds(device)
        finished_s: list[float] = []

        def early_request() -> None:
            encode(server.url, MINILM, body, as_json=False)
            finished_s.append(time.monotonic())

        early = [threading.Thread(target=early_request) for _ in range(4)]
        for thread in early:
            thread.start()
        wait_until(lambda: cpu_seconds(device) > busy_before + 0.3, 60, "device busy with the load")
        server.process.send_signal(signal.SIGTERM)
        try:
            late = {"items": [{"text": "late"}]}
            response = httpx.post(f"{server.url}/v1/encode/{MINILM}", json=late, timeout=60)
            outcome = (response.status_code, response.json()["detail"]["code"])
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
            # Refused, or reset from the listen backlog once the last listener closed: both
            # tell the client at once to go elsewhere.
            outcome = (0, "refused")
        answered_s = time.monotonic()
        for thread in early:
            thread.join(60)
        code = server.process.wait(60)  # no second SIGTERM: one during interpreter exit kills it (-15)
    finally:
        server.stop()
    assert code == 0, server.log()
    assert outcome in ((503, "SHUTTING_DOWN"), (0, "refused")), outcome
    # Promptly: answered while the drain still had work in flight, not queued behind it.
    assert len(finished_s) == 4 and answered_s < max(finished_s), (answered_s, finished_s)


def test_environment_alone_and_sigint() -> None:
    server = Server(frontends=None, env={"SIE_FRONTENDS": "1"}).wait_ready()
    try:
        roles = server.roles()
        assert len(roles["frontend"]) == 1 and len(roles["device"]) == 1, roles
        assert encode(server.url, MINILM, {"items": [{"text": "Hello"}]}, as_json=True).status_code == 200
    finally:
        code = server.stop(signal.SIGINT)
    assert code == 0, server.log()
    assert shm_names(server.instance) == []
    assert not [pid for pid in roles["frontend"] + roles["device"] if os.path.exists(f"/proc/{pid}")]


# -- import borders ------------------------------------------------------------------------------------------


def modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return {name.split(".")[0] for name in result.stdout.split()} | set(result.stdout.split())


@pytest.mark.parametrize(
    ("imports", "forbidden"),
    [
        ("import sie.frontend.app, sie.frontend.serve", {"torch", "transformers"}),
        (
            "import sie.gpu_proc.main, sie.gpu_proc.loop, sie.gpu_proc.adapters.dense",
            {"starlette", "hypercorn"},
        ),
        ("import sie.supervisor.run, sie.__main__", {"torch", "transformers", "starlette", "hypercorn"}),
    ],
    ids=["frontend", "device", "supervisor"],
)
def test_process_kinds_import_only_their_stack(imports: str, forbidden: set[str]) -> None:
    loaded = modules_after(imports)
    assert imports.split()[1].rstrip(",") in loaded
    assert not forbidden & loaded, forbidden & loaded


PICKLE_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "shelve"}


def test_no_sie_module_imports_pickle() -> None:
    offenders = []
    for path in sorted((REPO / "sie").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and getattr(node.func, "id", "") in (
                "__import__",
                "import_module",
            ):
                names = [
                    a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                ]
            offenders += [
                f"{path.relative_to(REPO)}: {n}" for n in names if n.split(".")[0] in PICKLE_MODULES
            ]
    assert offenders == []


def test_request_paths_hold_no_reference_to_pickle() -> None:
    # numpy imports pickle itself, so sys.modules cannot tell; no sie module may hold it or its functions.
    probe = (
        "import pickle, sys\n"
        "import sie.frontend.app, sie.frontend.serve, sie.frontend.devices\n"
        "import sie.gpu_proc.main, sie.gpu_proc.loop, sie.gpu_proc.adapters.dense\n"
        "import sie.supervisor.run, sie.shm.layout, sie.shm.ring\n"
        "bad = {pickle, pickle.loads, pickle.dumps, pickle.load, pickle.dump}\n"
        "bad |= {pickle.Pickler, pickle.Unpickler}\n"
        "hits = [f'{n}.{k}' for n, m in list(sys.modules.items()) if n.startswith('sie')\n"
        "        for k, v in vars(m).items() if any(v is b for b in bad)]\n"
        "print(hits)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
