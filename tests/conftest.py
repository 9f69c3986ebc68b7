"""Suite-wide hooks (see tests/strict_skips.py for the CI switch)."""

from __future__ import annotations

import importlib.util

import pytest

pytest_plugins = ["tests.strict_skips"]

# pytest-xdist hands whole files to its workers in collection order (`--dist loadfile`, as
# scripts/test.sh runs it): the longest files go first, so no worker is left alone at the end with
# one of them. The rest keep pytest's order.
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


# Importing gliformer makes its bidirectional Qwen3 transformers' AutoModel for Qwen3Config in the
# whole process; its first import goes through the adapter's guard, so this process's other Qwen3
# tests build transformers' own model.
if importlib.util.find_spec("gliformer") is not None:
    from sie.gpu_proc.adapters.gliformer import import_gliformer

    import_gliformer()
