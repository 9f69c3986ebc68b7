"""SIE's fake model as the tests serve it: no files to write, every output it can give declared."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def model_yaml_fake(sie_id: str, folder: Path | None = None, **loadtime: Any) -> dict[str, Any]:
    """The YAML of a fake with dense 16, sparse over 1000 terms and multi-vector 8 (`folder` is
    unused: it reads no files; the argument matches the other families' builders)."""
    return {
        "sie_id": sie_id,
        "tasks": {
            "encode": {"dense": {"dim": 16}, "sparse": {"dim": 1000}, "multivector": {"dim": 8}},
            "score": {},
        },
        "max_sequence_length": 64,
        "profiles": {
            "default": {
                "adapter": "fake",
                "adapter_options": {"loadtime": {"memory_footprint_bytes": 1 << 20, **loadtime}},
            }
        },
    }
