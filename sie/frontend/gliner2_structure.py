"""GLiNER2 structured extraction: a flat JSON schema (`params.output_schema`) in, one object out.

SIE's adapter turns the schema's properties into gliner2 field specs of one structure
(`name::str`, `name::list`, `name::[a|b]::str`, each with `::description`), which gliner2 parses
back into (name, dtype, choices, description). A field with choices is also listed before the
text, `( _sie_root: name ( a | b ) , ... )`, and its value is the choice whose listed word scores
highest. Decoding follows gliner2 2.x's `_extract_structures` and `_format_struct`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.gliner2 import MAX_NAME_CHARS, Schema, Words, check_field_names
from sie.frontend.gliner2_decode import best_spans, find_spans

ROOT = "_sie_root"  # SIE's name for the one structure
_DELIMITERS = ("::", "|", "[", "]")
_ROOT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "description", "title"})
_PROPERTY_KEYS = frozenset({"type", "description", "enum", "items", "title"})


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    dtype: str  # "str": one value; "list": every value found
    choices: tuple[str, ...] | None
    description: str | None


def parse_output_schema(schema: Any) -> list[Field]:
    """The schema's fields, checked as SIE checks them (a 400 names what is wrong)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise InvalidInput("GLiNER2 output_schema root type must be object")
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise InvalidInput("GLiNER2 output_schema requires non-empty properties")
    unsupported = sorted(set(schema) - _ROOT_KEYS)
    if unsupported:
        raise InvalidInput(f"GLiNER2 output_schema has unsupported root keywords: {unsupported}")
    required = schema.get("required", [])
    if (
        not isinstance(required, list)
        or any(r not in properties for r in required)
        or len(set(required)) != len(required)
    ):
        raise InvalidInput("GLiNER2 output_schema required must contain unique property names")
    if not isinstance(schema.get("additionalProperties", True), bool):
        raise InvalidInput("GLiNER2 output_schema additionalProperties must be boolean")
    fields = [parse_spec(_field_spec(name, definition)) for name, definition in properties.items()]
    check_field_names([f.name for f in fields], "output_schema property names")
    check_field_names([c for f in fields for c in f.choices or ()], "output_schema enum values")
    return fields


def _field_spec(name: str, definition: Any) -> str:
    """SIE's gliner2 field spec of one property."""
    if not name or any(d in name for d in _DELIMITERS):
        raise InvalidInput("GLiNER2 output_schema property names contain unsupported delimiters")
    if not isinstance(definition, dict):
        raise InvalidInput(f"GLiNER2 output_schema property {name!r} must be an object")
    unsupported = sorted(set(definition) - _PROPERTY_KEYS)
    if unsupported:
        raise InvalidInput(f"GLiNER2 output_schema property {name!r} has unsupported keywords: {unsupported}")
    description = definition.get("description") or definition.get("title")
    if description is not None and not isinstance(description, str):
        raise InvalidInput(f"GLiNER2 output_schema property {name!r} description must be a string")
    kind, enum = definition.get("type"), definition.get("enum")
    if enum is not None:
        if kind != "string" or not isinstance(enum, list) or not enum:
            raise InvalidInput(f"GLiNER2 output_schema property {name!r} has invalid enum")
        if any(not isinstance(c, str) or not c or any(d in c for d in _DELIMITERS) for c in enum):
            raise InvalidInput(
                f"GLiNER2 output_schema property {name!r} enum values contain unsupported delimiters"
            )
        spec = f"{name}::[{'|'.join(enum)}]::str"
    elif kind == "string":
        spec = f"{name}::str"
    elif kind == "array" and definition.get("items") == {"type": "string"}:
        spec = f"{name}::list"
    else:
        raise InvalidInput(
            f"GLiNER2 output_schema property {name!r} supports only string, string enum, or array of strings"
        )
    return f"{spec}::{description.replace('::', ':')}" if description else spec


def parse_spec(spec: str) -> Field:
    """gliner2's `_parse_field_spec` of a "name::dtype::[choices]::description" string."""
    name, *parts = spec.split("::")
    dtype, choices, description, explicit = "list", None, None, False
    for part in parts:
        if part in ("str", "list"):
            dtype, explicit = part, True
        elif part.startswith("[") and part.endswith("]"):
            choices = tuple(c.strip() for c in part[1:-1].split("|"))
            dtype = dtype if explicit else "str"
        else:
            description = part
    if len(name) > MAX_NAME_CHARS:
        raise InvalidInput(
            f"GLiNER2 output_schema property names may have at most {MAX_NAME_CHARS} characters each"
        )
    return Field(name, dtype, choices, description)


def prompt(fields: list[Field], order: list[str]) -> tuple[Schema, list[str]]:
    """The structure's schema (fields in `order`, descriptions in the schema's order) and the
    choices listed before the text."""
    title = ROOT + "".join(f" [DESCRIPTION] {f.name}: {f.description}" for f in fields if f.description)
    listed: list[str] = []
    for field in fields:
        if field.choices:
            listed += [field.name, "("] + [
                t for i, c in enumerate(field.choices) for t in ([c] if i == 0 else ["|", c])
            ]
            listed += [")", ","]
    prefix = ["(", f"{ROOT}:", *listed[:-1], ")"] if listed else []
    return Schema("structure", title, tuple(order)), prefix


def decode(
    scores: np.ndarray, fields: list[Field], order: list[str], words: Words, threshold: float
) -> dict[str, Any]:
    """The first instance with a value, as {field: value} in the schema's order. gliner2 may find
    several instances (SIE then fails the request); fields with no value are left out."""
    n_text = len(words.spans)
    for instance in scores:
        found: dict[str, Any] = {}
        for field in fields:
            row = instance[order.index(field.name)]
            if field.choices:
                found[field.name] = _choice(row[:-n_text], field.choices, words.prefix, threshold)
            elif field.dtype == "list":
                spans = best_spans(find_spans(row[-n_text:], threshold, words, n_text))
                found[field.name] = [s.text for s in spans]  # best_spans drops repeats, as _format_struct
            else:  # the best span, as gliner2 2.x picks one value (1.x took the first by position)
                spans = best_spans(find_spans(row[-n_text:], threshold, words, n_text))
                found[field.name] = spans[0].text if spans else None
        if any(v is not None and v != [] for v in found.values()):
            return {k: v for k, v in found.items() if v is not None}
    return {}


def _choice(
    rows: np.ndarray, choices: tuple[str, ...], prefix: tuple[str, ...], threshold: float
) -> str | None:
    """The choice whose listed word scores highest (width 0), if it reaches the threshold."""
    best, best_score = None, -1.0
    for choice in choices:
        index = next(
            (i for i, t in enumerate(prefix) if choice.lower() == t.lower() or choice.lower() in t.lower()),
            -1,
        )
        if 0 <= index < len(rows) and float(rows[index, 0]) > best_score:
            best, best_score = choice, float(rows[index, 0])
    return best if best and best_score >= threshold else None
