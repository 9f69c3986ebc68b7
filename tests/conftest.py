"""Suite-wide hooks (see tests/strict_skips.py for the CI switch)."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.strict_skips"]

# pytest-xdist hands whole files to its workers in collection order (`--dist loadfile`, as
# scripts/test.sh runs it, grouped as below): the longest files go first, so no worker is left
# alone at the end with one of them. The rest keep pytest's order.
LONGEST_FILES = (
    "tests/integration/test_lifecycle.py",
    "tests/integration/test_object_store.py",
    "tests/integration/test_balancer.py",
    "tests/integration/test_many_models.py",
    "tests/integration/test_several_devices.py",
    "tests/integration/test_fuzz_media.py",
    "tests/integration/test_live_catalog.py",
    "tests/integration/test_overload.py",
    "tests/integration/test_scifact.py",
    "tests/integration/test_florence2.py",
    "tests/integration/test_encode_families.py",
    "tests/integration/test_rebalance.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # stable


# The files whose tests or fixtures take a session server (tests/integration/conftest.py) go to one
# worker together, by the group below, which starts that server once instead of once per worker;
# the MiniLM server's files join the families' (test_sdk takes both). Every other file is a unit of
# its own, as `--dist loadfile` has it. (xdist's own `loadgroup` does not group under pytest 9,
# whose node ids are no longer the attribute xdist rewrites.)
SHARED_SERVERS = {
    "families": "families",
    "minilm_server": "families",
    "media": "media",
    "watched_server": "watched",
}
_PARAMETERS = re.compile(r"^\s*def \w+\(([^)]*)\)", re.MULTILINE)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class SharedServerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.partition("::")[0]
            return shared_server_of(root / path) or path

    return SharedServerScheduling(config, log)


@functools.cache
def shared_server_of(path: Path) -> str | None:
    """The group of the session server a test file's functions take as a parameter, if any."""
    try:
        source = path.read_text()
    except OSError:
        return None
    taken = {
        name.strip().partition(":")[0] for m in _PARAMETERS.finditer(source) for name in m.group(1).split(",")
    }
    return next((group for name, group in SHARED_SERVERS.items() if name in taken), None)


# Importing gliformer makes its bidirectional Qwen3 transformers' AutoModel for Qwen3Config in the
# whole process; its first import goes through the adapter's guard, so this process's other Qwen3
# tests build transformers' own model.
if importlib.util.find_spec("gliformer") is not None:
    from sie.gpu_proc.adapters.gliformer import import_gliformer

    import_gliformer()
