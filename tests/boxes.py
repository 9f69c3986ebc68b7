"""SIE's wire box against a reference's float corners: [x, y, width, height] in whole pixels, each
value truncated, so a corner within rounding of a pixel edge may land one pixel either way."""

from __future__ import annotations

from collections.abc import Sequence


def sie_bbox(corners: Sequence[float]) -> list[int]:
    x0, y0, x1, y1 = (float(v) for v in corners)
    return [int(x0), int(y0), int(x1 - x0), int(y1 - y0)]


def bbox_matches(bbox: Sequence[int], corners: Sequence[float]) -> bool:
    """`bbox` is the reference's corners on the wire, up to a pixel where rounding decides."""
    return all(isinstance(v, int) for v in bbox) and all(
        abs(a - b) <= 1 for a, b in zip(bbox, sie_bbox(corners), strict=True)
    )
