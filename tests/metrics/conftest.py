from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.metrics.blocks import Blocks, made_blocks


@pytest.fixture
def blocks() -> Iterator[Blocks]:
    """2 devices, 2 frontends, 3 models."""
    with made_blocks() as made:
        yield made
