from __future__ import annotations

import tomllib

from sie.version import SIE_PROTOCOL_VERSION, __version__
from tests.integration.server import REPO


def test_own_version_matches_the_package_and_the_protocol_is_sies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert __version__ == project["version"]
    assert SIE_PROTOCOL_VERSION == "0.10.1"  # what sie-sdk 0.10.x compares itself with
