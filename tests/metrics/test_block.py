"""The statistics segment: dimensions travel with it, every process sees the same counters."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from sie.metrics.block import StatsBlock
from sie.metrics.labels import CODES, ROUTES, STATUSES
from tests.metrics.blocks import Blocks


def test_attach_reads_the_dimensions_and_shares_the_counters(blocks: Blocks) -> None:
    other = StatsBlock.attach(blocks.stats.name)
    try:
        assert (other.n_devices, other.n_frontends, other.n_models) == (2, 2, 3)
        assert other.none_slot == 3
        assert other.v["requests"].shape == (2, len(ROUTES), 4, len(STATUSES) + 1)
        assert other.v["errors"].shape == (2, 4, len(CODES))
        blocks.stats.v["items"][1, 2] += 5
        assert other.v["items"][1, 2] == 5
    finally:
        other.close()


def test_another_process_sees_the_writes(blocks: Blocks) -> None:
    code = (
        "import sys; from sie.metrics.block import StatsBlock\n"
        f"b = StatsBlock.attach({blocks.stats.name!r}); b.v['batch_items'][0, 1] += 7; b.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert blocks.stats.v["batch_items"][0, 1] == 7


def test_a_segment_of_another_layout_is_refused(blocks: Blocks) -> None:
    blocks.stats.v["header"][0] = 0x1234
    with pytest.raises(RuntimeError, match="wrong magic"):
        StatsBlock.attach(blocks.stats.name)


def test_a_new_block_starts_at_zero(blocks: Blocks) -> None:
    for key, view in blocks.stats.v.items():
        if key != "header":
            assert not np.any(view), key
