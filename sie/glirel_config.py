"""A GLiREL checkpoint's settings and where its encoder's files are: both sides read them.

GLiREL (`glirel` on PyPI) saves `glirel_config.json` and `pytorch_model.bin` only. Its encoder is
named by the config's `model_name` and built by transformers' Auto classes: a Hub id (the published
checkpoints name microsoft/deberta-v3-large) or a local folder. The device builds the encoder from
that folder's config.json and reads every weight from the checkpoint; the frontend reads the
encoder's kind (for the subword bound) from the same config.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sie.model_config import ModelConfigError
from sie.model_location import repository_dir

CONFIG_FILE = "glirel_config.json"
REL_TOKEN = "[REL]"  # GLiREL's relation-type marker, one before each type in the prompt
SEP_TOKEN = "[SEP]"  # ends the prompt
LABEL_STRATEGIES = (
    "ent_token",
    "label",
    "both",
)  # what stands for a relation type: [REL], its words, or both
SPAN_MODES = ("markerv1", "markerv2")


@dataclass(frozen=True, slots=True)
class GlirelSettings:
    """The fields of glirel_config.json the prompt, the words read and the forward depend on."""

    model_name: str  # the encoder: a Hub id or a local folder
    max_len: int  # words of a text read; GLiREL drops the rest
    label_embed_strategy: str
    max_entity_pair_distance: int | None  # None: every ordered pair of entities is scored

    @classmethod
    def read(cls, weights_dir: Path) -> GlirelSettings:
        path = weights_dir / CONFIG_FILE
        if not path.is_file():
            raise ModelConfigError(f"{weights_dir} holds no {CONFIG_FILE}: not a GLiREL checkpoint")
        raw = yaml.safe_load(path.read_text())  # glirel reads its JSON config with a YAML parser
        if not isinstance(raw, dict):
            raise ModelConfigError(f"{path}: expected a mapping")
        return cls.from_config(raw)

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> GlirelSettings:
        _check_architecture(raw)
        distance = raw.get("max_entity_pair_distance")
        return cls(
            model_name=str(raw["model_name"]),
            max_len=int(raw["max_len"]),
            label_embed_strategy=str(raw["label_embed_strategy"]),
            max_entity_pair_distance=None if distance is None else int(distance),
        )


def _check_architecture(raw: Mapping[str, Any]) -> None:
    """What this server's forward covers: GLiREL 1.x's marker models, first sub-token pooling,
    no entity markers written into the text."""
    missing = [key for key in ("model_name", "max_len", "label_embed_strategy") if key not in raw]
    if missing:
        raise ModelConfigError(f"GLiREL config lacks {missing} (a glirel 1.x checkpoint has them)")
    unsupported = []
    if raw["label_embed_strategy"] not in LABEL_STRATEGIES:
        unsupported.append(f"label_embed_strategy {raw['label_embed_strategy']!r}")
    if raw.get("subtoken_pooling", "first") != "first":
        unsupported.append(f"subtoken_pooling {raw.get('subtoken_pooling')!r}")
    if raw.get("rel_mode", "marker") != "marker":
        unsupported.append(f"rel_mode {raw.get('rel_mode')!r}")
    if raw.get("span_marker_mode") not in SPAN_MODES:
        unsupported.append(f"span_marker_mode {raw.get('span_marker_mode')!r}")
    if raw.get("add_entity_markers"):
        unsupported.append("add_entity_markers (entity markers written into the text)")
    if unsupported:
        raise ModelConfigError(f"GLiREL variant not supported: {', '.join(unsupported)}")


def backbone_dir(settings: GlirelSettings, dependencies: Mapping[str, str]) -> Path:
    """The encoder's folder (config.json): `model_name` itself when it is a local folder, else its
    cached repository, at the revision the YAML's hf_tokenizer_dependencies pins for it (or main)."""
    return repository_dir(settings.model_name, dependencies.get(settings.model_name))
