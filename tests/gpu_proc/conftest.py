"""Tiny random-weight encoders of each supported architecture, built once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .tiny import ARCHS, tiny_config


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import torch
    import transformers

    folders: dict[str, Path] = {}
    for arch in ARCHS:
        torch.manual_seed(0)
        model = transformers.AutoModel.from_config(tiny_config(arch))  # type: ignore[no-untyped-call]
        folder = tmp_path_factory.mktemp(arch)
        model.save_pretrained(folder)
        folders[arch] = folder
    return folders


@pytest.fixture
def deterministic_torch() -> Iterator[None]:
    # Not autouse: the batcher tests must run without importing torch.
    import torch

    before = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    # Tiny models gain nothing from intra-op threads, and on a loaded 2-core box they lose a lot.
    torch.set_num_threads(1)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.set_num_threads(before[1])
