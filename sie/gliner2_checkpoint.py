"""What a GLiNER2 checkpoint's config.json says, read by both halves: which network it is (the span
network of gliner2 1.x, or GLiNER2.5's boundary network) and how its results are decoded."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Architecture = Literal["span", "boundary"]
DEFAULT_MAX_WIDTH = 8  # gliner2's span default
# A boundary checkpoint's candidates, as the device sends them: start word, end word (exclusive),
# probability, kept by the predicted count.
CANDIDATE_COLUMNS = 4
# gliner2's names for its overlap rules, by the canonical rule each one means.
OVERLAP_POLICIES = {
    "allow": "allow", "all": "allow", "none": "allow",
    "nested": "nested", "allow_nested": "nested",
    "flat": "disallow", "disallow": "disallow", "no_overlap": "disallow", "non_overlapping": "disallow",
    "longest": "longest", "keep_longest": "longest",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Gliner2Checkpoint:
    architecture: Architecture = "span"
    max_width: int = DEFAULT_MAX_WIDTH  # span network: widths scored per word
    abstention_threshold: float = 0.5  # boundary: a label whose abstention is above it finds nothing
    overlap_policy: str = "disallow"  # boundary: the canonical rule among a label's spans

    @classmethod
    def read(cls, weights_dir: Path) -> Gliner2Checkpoint:
        with (weights_dir / "config.json").open() as fh:
            raw: dict[str, Any] = json.load(fh)
        architecture = str(raw.get("architecture") or "span").strip().lower()
        if architecture not in ("span", "boundary"):
            raise ValueError(f"GLiNER2 architecture {architecture!r} is not served (only span and boundary)")
        head = raw.get("boundary_head") or {}
        policy = str(head.get("overlap_policy", "flat")).strip().lower().replace("-", "_")
        if policy not in OVERLAP_POLICIES:
            raise ValueError(f"GLiNER2 overlap_policy {policy!r} is not known")
        return cls(
            architecture,  # type: ignore[arg-type]
            int(raw.get("max_width", DEFAULT_MAX_WIDTH)),
            float(head.get("abstention_threshold", 0.5)),
            OVERLAP_POLICIES[policy],
        )
