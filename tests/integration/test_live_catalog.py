"""The models directory is live: files added, changed or removed apply without a restart.

One server with the directory watcher on and one with it off (SIGHUP only). MiniLM's packaged
weights serve every model id; what differs between them is the YAML (templates), so a change is
seen in the vectors, checked against plain transformers on the templated text.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from .reference import minilm_dir, reference_embeddings
from .server import Server, shm_names

pytestmark = pytest.mark.slow

WAIT_S = 15.0  # the watcher looks every 2 s; a frontend sees the change on its next request


def _write(models: Path, name: str, template: str | None = None) -> None:
    runtime: dict[str, Any] = {"pooling": "mean", "normalize": True}
    if template is not None:
        runtime["doc_template"] = template
    config = {
        "sie_id": name,
        "weights": {"path": str(minilm_dir())},
        "tasks": {"encode": {"dense": {"dim": 384}}},
        "max_sequence_length": 256,
        "profiles": {"default": {"adapter": "dense", "adapter_options": {"runtime": runtime}}},
    }
    (models / (name.replace("/", "__") + ".yaml")).write_text(yaml.safe_dump(config))


def _encode(server: Server, name: str, text: str) -> httpx.Response:
    body = {"items": [{"text": text}]}
    return httpx.post(
        f"{server.url}/v1/encode/{name}", json=body, headers={"accept": "application/json"}, timeout=60
    )


def _vector(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.asarray(response.json()["items"][0]["dense"]["values"], np.float32)


def _eventually(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.25)
    raise AssertionError(f"not seen within {WAIT_S} s: {what}")


def _listed(server: Server) -> set[str]:
    models = httpx.get(f"{server.url}/v1/models", timeout=10).json()["models"]
    return {m["name"] for m in models if m.get("supported", True)}


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    models = tmp_path_factory.mktemp("live")
    _write(models, "live/a")
    server = Server("--models-dir", str(models), "--preload", "live/a").wait_ready()
    yield server, models
    assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []


def test_added_changed_and_removed_files_apply_while_running(watched: tuple[Server, Path]) -> None:
    server, models = watched
    text = "A man is eating food."
    before = _vector(_encode(server, "live/a", text))
    np.testing.assert_allclose(before, reference_embeddings([text], minilm_dir())[0], atol=1e-4)

    _write(models, "live/b", template="passage: {text}")
    _eventually(lambda: "live/b" in _listed(server), "the added model listed")
    _eventually(lambda: _encode(server, "live/b", text).status_code == 200, "the added model served")
    want_b = reference_embeddings([f"passage: {text}"], minilm_dir())[0]
    np.testing.assert_allclose(_vector(_encode(server, "live/b", text)), want_b, atol=1e-4)

    _write(models, "live/a", template="query: {text}")  # a changed model is reloaded on its next use
    want_a = reference_embeddings([f"query: {text}"], minilm_dir())[0]

    def changed() -> bool:
        response = _encode(server, "live/a", text)
        return response.status_code == 200 and np.allclose(_vector(response), want_a, atol=1e-4)

    _eventually(changed, "the changed template applied")

    (models / "live__b.yaml").unlink()
    _eventually(lambda: _encode(server, "live/b", text).status_code == 404, "the removed model gone")
    assert "live/b" not in _listed(server)

    (models / "live__broken.yaml").write_text("sie_id: live/broken\nprofiles: [")  # named by its file
    _eventually(
        lambda: _encode(server, "live/broken", text).status_code == 502, "a bad file listed, not fatal"
    )
    np.testing.assert_allclose(_vector(_encode(server, "live/a", text)), want_a, atol=1e-4)


def test_sighup_rereads_when_the_watcher_is_off(tmp_path: Path) -> None:
    _write(tmp_path, "live/a")
    server = Server("--models-dir", str(tmp_path), "--preload", "live/a", "--watch-models-dir", "false")
    try:
        server.wait_ready()
        _write(tmp_path, "live/c", template="passage: {text}")
        time.sleep(5.0)  # two watcher periods: nothing may change without the signal
        assert _encode(server, "live/c", "x").status_code == 404
        server.process.send_signal(signal.SIGHUP)
        _eventually(lambda: _encode(server, "live/c", "x").status_code == 200, "the model added on SIGHUP")
    finally:
        assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []
