"""Donut's generated sequence -> JSON fields -> SIE's entities.

`token2json` is `DonutProcessor.token2json`'s algorithm: `<s_key>...</s_key>` is a field, a field
holding tags is a nested object (a list of them when `<sep/>` separates objects), a leaf holds
text (a list when `<sep/>` separates values, `<name/>` of the added vocabulary read as `name`),
an opening tag without its end is dropped, and a sequence with no field is
`{"text_sequence": ...}`.

SIE returns the fields as entities (score 1.0, no offsets): for CORD (`<s_cord-v2>`) one per
text field of an object, labelled by its path (`menu.nm`, `[0].price`; lists of plain values are
skipped), for DocVQA the `answer`, for RVL-CDIP the `class` (as `document_class`); other tasks
give none.
"""

from __future__ import annotations

import re
from collections.abc import Set
from typing import Any

Parsed = dict[str, Any] | list[Any]
CORD, DOCVQA, RVLCDIP = "<s_cord-v2>", "<s_docvqa>", "<s_rvlcdip>"
_SEP = "<sep/>"
_START = re.compile("<s_", re.IGNORECASE)


def token2json(tokens: str, added: Set[str], *, is_inner: bool = False) -> Parsed:
    """The fields of a cleaned sequence, as `DonutProcessor.token2json` reads them."""
    output: dict[str, Any] = {}
    while tokens:
        found = _START.search(tokens)
        if found is None or ">" not in tokens[found.start() :]:
            break
        start_tag = tokens[found.start() : tokens.index(">", found.start()) + 1]
        key = start_tag[3:-1]
        end = re.search(rf"</s_{re.escape(key)}>", tokens, re.IGNORECASE)
        if end is None:
            tokens = tokens.replace(start_tag, "")
            continue
        end_tag = end.group()
        content = re.search(
            f"{re.escape(start_tag)}(.*?){re.escape(end_tag)}", tokens, re.IGNORECASE | re.DOTALL
        )
        if content is not None:
            _add_field(output, key, content.group(1).strip(), added)
        tokens = tokens[tokens.find(end_tag) + len(end_tag) :].strip()
        if tokens[:6] == _SEP:  # the next object of a list
            rest = token2json(tokens[6:], added, is_inner=True)
            return [output, *(rest if isinstance(rest, list) else [rest])]
    if output:
        return [output] if is_inner else output
    return [] if is_inner else {"text_sequence": tokens}


def _add_field(output: dict[str, Any], key: str, content: str, added: Set[str]) -> None:
    if "<s_" in content and "</s_" in content:  # an object (or a list of them)
        value = token2json(content, added, is_inner=True)
        if value:
            output[key] = value[0] if isinstance(value, list) and len(value) == 1 else value
        return
    leaves = [_leaf(leaf.strip(), added) for leaf in content.split(_SEP)]
    output[key] = leaves[0] if len(leaves) == 1 else leaves


def _leaf(leaf: str, added: Set[str]) -> str:
    if leaf in added and leaf[0] == "<" and leaf[-2:] == "/>":
        return leaf[1:-2]  # a categorical value, such as <receipt/>
    return leaf


def entities_of(parsed: Parsed, task: str) -> list[dict[str, Any]]:
    """SIE's entities for the task's parsed fields."""
    if task == CORD:
        return [_entity(text, label) for label, text in _text_fields(parsed, "")]
    if task in (DOCVQA, RVLCDIP) and isinstance(parsed, dict):
        key, label = ("answer", "answer") if task == DOCVQA else ("class", "document_class")
        value = parsed.get(key, parsed.get("raw", ""))
        return [_entity(value, label)] if isinstance(value, str) and value else []
    return []


def _text_fields(value: Any, path: str) -> list[tuple[str, str]]:
    """(path, text) of every text field of the objects under `value`, in order."""
    found: list[tuple[str, str]] = []
    if isinstance(value, dict):
        for key, child in value.items():
            label = f"{path}.{key}" if path else key
            found.extend([(label, child)] if isinstance(child, str) else _text_fields(child, label))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            found.extend(_text_fields(child, f"{path}[{i}]"))
    return found


def _entity(text: str, label: str) -> dict[str, Any]:
    return {"text": text, "label": label, "score": 1.0, "start": None, "end": None, "bbox": None}
