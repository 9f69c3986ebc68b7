"""SIE's own model YAML files, where the development box keeps them beside the repository. A plain
clone has none: the tests that read them skip (or, in CI, fail: tests/strict_skips.py)."""

from __future__ import annotations

from pathlib import Path

SIE_CATALOG = Path(__file__).resolve().parents[2] / "shared" / "sie-catalog" / "models"
