from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.integration.server import Server, shm_names

if TYPE_CHECKING:
    from tests.integration.watched_server import WatchedServer


@pytest.fixture(scope="session")
def minilm_server() -> Iterator[Server]:
    """One server on the built-in default model, shared by the read-only tests."""
    server = Server().wait_ready()
    yield server
    code = server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []


@pytest.fixture(scope="session")
def families(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Path]]]:
    """One server with a tiny model of every family, all preloaded; and each model's weights folder."""
    from tests.integration.families import BUILDERS, DENSE, build_models_dir

    models_dir, folders = build_models_dir(tmp_path_factory.mktemp("families"))
    preload = ",".join([*BUILDERS, DENSE])
    server = Server("--models-dir", str(models_dir), "--preload", preload, frontends=1).wait_ready(180)
    yield server, folders
    code = server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, Path]]]:
    """One server with tiny image and audio models (and a text-only one), small media limits and a
    2.5 MiB request ring (so a request of many images spans several ring messages)."""
    from tests.integration.media_models import build_media_models, media_server_args

    models_dir, folders = build_media_models(tmp_path_factory.mktemp("media"))
    server = Server(*media_server_args(models_dir, folders), frontends=1).wait_ready(180)
    yield server, folders
    code = server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []


@pytest.fixture(scope="session")
def watched_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedServer]:
    """One server for the files that add their models to it (tests/integration/watched_server.py),
    where a server each would cost a start each."""
    from tests.integration.watched_server import MAX_IMAGE_PIXELS, WatchedServer

    root = tmp_path_factory.mktemp("watched")
    models, local_cache = root / "models", root / "hf-home"
    models.mkdir()
    (local_cache / "hub").mkdir(parents=True)  # HF_HOME's layout, which the server reads at its start
    args = ["--models-dir", str(models), "--local-cache", str(local_cache)]
    server = Server(*args, "--max-image-pixels", str(MAX_IMAGE_PIXELS), frontends=1).wait_ready()
    yield WatchedServer(server, models, local_cache)
    code = server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []
