"""Settings of an output transform (MUVERA, SMVE) layered from three places and checked by bounds:
the model's `<name>_config`, the profile's runtime `<name>`, the request's `options.<name>`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sie.errors import InvalidInput

# Every allowed key, in the order error messages list them: (low, high, may be null) of an integer
# setting, or None for a boolean.
Bounds = Mapping[str, tuple[int, int, bool] | None]


def layered(name: str, options: Any, profile: Any, defaults: Any, bounds: Bounds) -> dict[str, Any] | None:
    """The merged, checked settings, or None when neither the request nor the profile asks for the
    transform. Later layers override earlier ones key by key."""
    if options is None and profile is None:
        return None
    merged: dict[str, Any] = {}
    for source, where in (
        (defaults, f"the model's {name}_config"),
        (profile, f"the profile's {name}"),
        (options, f"options.{name}"),
    ):
        if source is not None:
            merged.update(_checked_mapping(source, where, bounds))
    return merged


def _checked_mapping(source: Any, where: str, bounds: Bounds) -> dict[str, Any]:
    if not isinstance(source, Mapping):
        raise InvalidInput(f"{where} must be an object or null, got {type(source).__name__}")
    allowed = list(bounds)
    unknown = sorted(str(key) for key in source if key not in bounds)
    if unknown:
        raise InvalidInput(f"Unknown {where} keys: {unknown}. Allowed: {allowed}")
    return {key: _checked(key, value, where, bounds[key]) for key, value in source.items()}


def _checked(name: str, value: Any, where: str, bound: tuple[int, int, bool] | None) -> Any:
    if bound is None:
        if not isinstance(value, bool):
            raise InvalidInput(f"{where}.{name} must be a boolean, got {value!r}")
        return value
    low, high, nullable = bound
    if value is None and nullable:
        return None
    # bool is an int in Python, but `true` for a count is a client mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        kind = "an integer or null" if nullable else "an integer"
        raise InvalidInput(f"{where}.{name} must be {kind} in [{low}, {high}], got {value!r}")
    return value
