from __future__ import annotations

from collections.abc import Iterator

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
