"""The shipped systemd units install as they are: `systemd-analyze verify` finds nothing to say once
the venv they name exists (here: this checkout's, put where the units expect /opt/sie/.venv)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.server import REPO

ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize(
    ("unit", "name"), [("sie.service", "sie.service"), ("sie@.service", "sie@gpu0.service")]
)
def test_unit_verifies_clean(tmp_path: Path, unit: str, name: str) -> None:
    text = (REPO / "scripts" / unit).read_text()
    assert "/opt/sie/.venv/bin/python -m sie serve" in text
    copy = tmp_path / name
    copy.write_text(text.replace("/opt/sie/.venv/bin/python", str(Path(sys.executable).resolve())))
    assert ANALYZE is not None
    done = subprocess.run([ANALYZE, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
