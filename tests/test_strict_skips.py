"""The CI switch: with SIE_TEST_NO_SKIP=1 a skip CI should never take fails; the allowed ones stay."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.integration.server import REPO

SUITE = """
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="/x/.venv-sdk/bin/python missing")
def test_needs_the_sdk():
    pass

def test_needs_cuda():
    pytest.skip("needs CUDA")

def test_needs_haproxy():
    pytest.skip("haproxy is not installed")
"""
MODULE_SKIP = 'import pytest\nnot_there = pytest.importorskip("no_such_module_at_all")\n'


def run(tmp_path: Path, strict: bool) -> str:
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    env = {k: v for k, v in os.environ.items() if k != "SIE_TEST_NO_SKIP"}
    if strict:
        env["SIE_TEST_NO_SKIP"] = "1"
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.strict_skips",
            "-p",
            "no:cacheprovider",
            "-rA",
            "--continue-on-collection-errors",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    return done.stdout


def test_without_the_switch_skips_are_skips(tmp_path: Path) -> None:
    out = run(tmp_path, strict=False)
    assert "1 passed, 4 skipped" in out, out


def test_with_the_switch_only_allowed_skips_remain(tmp_path: Path) -> None:
    out = run(tmp_path, strict=True)
    assert "1 failed, 1 passed, 1 skipped, 2 errors" in out, out
    assert "SKIPPED [1] test_suite.py" in out and "needs CUDA" in out
    for reason in (
        "/x/.venv-sdk/bin/python missing",
        "haproxy is not installed",
        "could not import 'no_such_module_at_all'",
    ):
        assert f"CI never skips this (SIE_TEST_NO_SKIP=1): Skipped: {reason}" in out, (reason, out)
