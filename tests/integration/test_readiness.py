"""The server's side of the balancer contract on one real server: readiness, drain delay, instance."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.balancer import tiny_models_dir
from tests.integration.server import Server, shm_names, wait_until

pytestmark = pytest.mark.slow

MODEL = "tiny/ready-model"
DRAIN_DELAY_S = 60.0


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_models_dir(tmp_path_factory.mktemp("readiness"), [MODEL])


def test_ready_after_preload_unready_at_sigterm_and_serving_through_the_delay(models_dir: Path) -> None:
    # A long delay, cut short by a second SIGTERM (test_balancer.py sees a 2 s one run out by itself).
    args = ("--models-dir", str(models_dir), "--preload", MODEL, "--drain-delay-s", str(DRAIN_DELAY_S))
    server = Server(*args, frontends=1)
    try:
        first_ok = wait_until(lambda: _ready_answer(server), 90, "the server answers /readyz 200")
        assert first_ok == "loaded"  # never ready before the preloaded model is
        instance = f"{server.instance}@{os.uname().nodename}"
        response = _encode(server)
        assert response.status_code == 200 and response.headers["x-sie-instance"] == instance

        server.process.send_signal(signal.SIGTERM)
        signalled_s = time.monotonic()
        wait_until(lambda: _readyz(server) == 503, 1.0, "/readyz turns 503 at once")
        served = [_encode(server).status_code for _ in range(5)]
        assert set(served) == {200}, served  # the delay: not ready, still serving
        assert server.process.poll() is None
        server.process.send_signal(signal.SIGTERM)  # the second one skips the rest of the delay
        code = server.process.wait(30)
        assert time.monotonic() - signalled_s < DRAIN_DELAY_S / 2
    finally:
        server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []


def _readyz(server: Server) -> int:
    try:
        return httpx.get(server.url + "/readyz", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def _ready_answer(server: Server) -> str:
    """ "" until /readyz is 200; then whether the preloaded model was loaded at that moment."""
    if _readyz(server) != 200:
        return ""
    info = httpx.get(f"{server.url}/v1/models/{MODEL}", timeout=5).json()
    return str(info["state"])


def _encode(server: Server) -> httpx.Response:
    body = {"items": [{"text": "still here"}]}
    return httpx.post(f"{server.url}/v1/encode/{MODEL}", json=body, timeout=30)
