"""The model families this server serves, one spec module each, registered here by name.

Adding a family: write `sie/families/<name>.py` defining `FAMILY = Family(name="<name>", ...)` and
add `<name>` to `_SPEC_MODULES` below (docs/adding-a-family.md has the rest). Spec modules import
nothing heavy: frontends and the supervisor import this package.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

from sie.families.spec import EncodeOutput, Family, InputKind, ScoreMethod, resolve_target

_SPEC_MODULES = (
    "dense",
    "splade",
    "colbert",
    "colpali",
    "colqwen2",
    "colqwen3",
    "colsmol",
    "hybrid",
    "cross_encoder",
    "context_pruner",
    "llm_reranker",
    "nli_zero_shot",
    "token_classification",
    "privacy_filter",
    "gliner",
    "gliner_bi",
    "gliclass",
    "gliner2",
    "gliner2_decide",
    "gliner_union",
    "glirel",
    "gliformer",
    "laya",
    "clip",
    "owlv2",
    "grounding_dino",
    "whisper",
    "parakeet",
    "florence2",
    "lighton_ocr",
    "lighton_ocr3",
    "glm_ocr",
    "paddleocr_vl",
    "mineru_vl",
    "qwen3_vl_embedding",
    "qwen3_vl_reranker",
    "donut",
    "fake",
)


class UnknownFamily(ValueError):
    """A profile names an adapter family that no spec module registers."""


def _spec_of(module_name: str) -> Family:
    spec = getattr(importlib.import_module(f"{__name__}.{module_name}"), "FAMILY", None)
    if not isinstance(spec, Family) or spec.name != module_name:
        raise TypeError(f"{__name__}.{module_name}.FAMILY must be a Family named {module_name!r}")
    return spec


FAMILIES: Mapping[str, Family] = MappingProxyType({name: _spec_of(name) for name in _SPEC_MODULES})


def family_of(name: str) -> Family:
    """The registered family called `name`; an unknown name is an UnknownFamily listing the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise UnknownFamily(f"unknown adapter family {name!r} (known: {known})") from None


__all__ = [
    "FAMILIES",
    "EncodeOutput",
    "Family",
    "InputKind",
    "ScoreMethod",
    "UnknownFamily",
    "family_of",
    "resolve_target",
]
