"""A GLiNER union model's members and composition options: the YAML reader, the device and the
frontend all read them, so they live at the top level and import no torch.

A union serves several GLiNER span models under one id, composed as SIE's PII redaction study
composes urchade/gliner_multi_pii-v1 and numind/NuNER_Zero (SIE's GLiNERUnionAdapter; the frontend's
`sie.frontend.gliner_union` has the recipe). Its first member is the model's own weights; the
profile's `loadtime.members` names the others, each a mapping of
- `model` (a Hub id) at `revision` (a full commit SHA), as SIE's YAML names them, or `path` (a
  local folder), and
- `options`: the member's GLiNER settings (`threshold`, `flat_ner`, `multi_label`,
  `merge_adjacent_entities`); a member runs at its own settings whatever the request asks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sie.model_config import ModelConfig
from sie.model_location import hf_snapshot

MEMBER_KEYS = frozenset({"model", "revision", "path", "options"})
# SIE's GLiNERAdapter options a member may set, and SIE's engine tuning that changes no result.
MEMBER_OPTIONS = frozenset({"threshold", "flat_ner", "multi_label", "merge_adjacent_entities"})
MEMBER_TUNING = frozenset({"batch_size"})
# The composition options (profile runtime defaults, each overridable by a request's options).
UNION_OPTIONS = (
    "score_floor",
    "window_words",
    "window_overlap",
    "propagate_label",
    "name_min_letters",
    "default_labels",
)
_COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True, slots=True)
class Member:
    """One member besides the first: where its weights are, and the settings it runs at."""

    model: str | None = None
    revision: str | None = None
    path: str | None = None
    threshold: float = 0.5
    flat_ner: bool = True
    multi_label: bool = False
    merge_adjacent_entities: bool = False

    def folder(self) -> Path:
        """Its weights folder: the local path, or the cached Hub snapshot at the pinned revision."""
        if self.path is not None:
            return Path(self.path).expanduser()
        assert self.model is not None  # parse_members gives one of the two
        return hf_snapshot(self.model, self.revision)


@dataclass(frozen=True, slots=True)
class UnionOptions:
    """How the members' spans are composed (SIE's defaults)."""

    score_floor: float = 0.0  # a member's span scoring below it is dropped
    window_words: int = 300  # a longer text is read in windows of this many words...
    window_overlap: int = 50  # ...each sharing this many with the next
    propagate_label: str | None = None  # spans of this label mark their names everywhere; None: off
    name_min_letters: int = 3  # the fewest letters of a name so marked
    default_labels: tuple[str, ...] = field(default_factory=tuple)  # for a request naming none


_MEMBER, _UNION = Member(path="."), UnionOptions()  # the defaults, read field by field


def parse_members(raw: Any) -> list[Member]:
    """`loadtime.members`, checked; ValueError names what is wrong."""
    if not isinstance(raw, list) or not raw:
        raise ValueError("a GLiNER union needs at least one other member in loadtime.members")
    return [_member(spec) for spec in raw]


def member_repositories(config: ModelConfig, weights_dir: Path) -> dict[str, str | None]:
    """The members' Hub checkpoints over all profiles, at their pinned revisions (the family's
    companions); a profile whose members are malformed names none, its load says why."""
    found: dict[str, str | None] = {}
    for profile in config.profiles.values():
        try:
            members = parse_members(profile.adapter_options.loadtime.get("members"))
        except ValueError:
            continue
        found.update({member.model: member.revision for member in members if member.model is not None})
    return found


def _member(spec: Any) -> Member:
    if not isinstance(spec, Mapping) or set(spec) - MEMBER_KEYS:
        raise ValueError("each GLiNER union member is a mapping of model, revision (or path) and options")
    model, revision, path = spec.get("model"), spec.get("revision"), spec.get("path")
    if (model is None) == (path is None):
        raise ValueError("a GLiNER union member names its weights by model (with revision) or by path")
    if model is not None and not (isinstance(model, str) and model):
        raise ValueError("a GLiNER union member's model must be a Hub id")
    if model is not None and not (isinstance(revision, str) and _COMMIT.fullmatch(revision)):
        raise ValueError(f"GLiNER union member {model} needs a revision pinned to a full commit SHA")
    if path is not None and not (isinstance(path, str) and path):
        raise ValueError("a GLiNER union member's path must be a folder")
    options = dict(spec.get("options") or {})
    unknown = sorted(set(options) - MEMBER_OPTIONS - MEMBER_TUNING)
    if unknown:
        raise ValueError(
            f"GLiNER union member {model or path} sets unsupported option(s) {', '.join(unknown)}"
        )
    threshold = options.get("threshold", _MEMBER.threshold)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        raise ValueError("a GLiNER union member's threshold must be a number between 0 and 1")
    flags = {
        key: options.get(key, getattr(_MEMBER, key))
        for key in ("flat_ner", "multi_label", "merge_adjacent_entities")
    }
    if not all(isinstance(value, bool) for value in flags.values()):
        raise ValueError(
            "a GLiNER union member's flat_ner, multi_label and merge_adjacent_entities are booleans"
        )
    return Member(model, revision if model is not None else None, path, float(threshold), **flags)


def union_options(values: Mapping[str, Any]) -> UnionOptions:
    """The composition options from `values` (absent or None: the default), checked; ValueError
    names what is wrong (a 400 for a request's, a refused profile for a YAML's)."""
    given = {key: values[key] for key in UNION_OPTIONS if values.get(key) is not None}
    floor = given.get("score_floor", _UNION.score_floor)
    if (
        isinstance(floor, bool)
        or not isinstance(floor, int | float)
        or not math.isfinite(floor)
        or not 0 <= floor <= 1
    ):
        raise ValueError("score_floor must be a number between 0 and 1")
    size = given.get("window_words", _UNION.window_words)
    overlap = given.get("window_overlap", _UNION.window_overlap)
    letters = given.get("name_min_letters", _UNION.name_min_letters)
    for name, value, low in (
        ("window_words", size, 2),
        ("window_overlap", overlap, 0),
        ("name_min_letters", letters, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer of at least {low}")
    if overlap >= size:
        raise ValueError("window_overlap must be less than window_words")
    label = given.get("propagate_label")
    if label is not None and not isinstance(label, str):
        raise ValueError("propagate_label must be a label or null")
    labels = given.get("default_labels", [])
    if (
        not isinstance(labels, Sequence)
        or isinstance(labels, str)
        or ("default_labels" in given and not labels)
    ):
        raise ValueError("default_labels must be a non-empty list of labels")
    if not all(isinstance(x, str) and x.strip() for x in labels):
        raise ValueError("default_labels must be a non-empty list of labels")
    return UnionOptions(float(floor), size, overlap, label or None, letters, tuple(labels))
