"""Suite-wide hooks (see tests/strict_skips.py for the CI switch)."""

from __future__ import annotations

pytest_plugins = ["tests.strict_skips"]
