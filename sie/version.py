"""Two versions, kept apart: this project's own, and the SIE wire protocol it speaks.

`x-sie-server-version` is what SIE SDKs compare with their own version to warn about skew, so it
carries the protocol version (SIE 0.10.1's API); this project's version goes in the `server` header
and `GET /version`, where nothing keys on it.
"""

from __future__ import annotations

__version__ = "0.1.0"  # keep in step with pyproject.toml (a test checks)
SIE_PROTOCOL_VERSION = "0.10.1"
