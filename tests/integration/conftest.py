from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.server import Server, shm_names


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
