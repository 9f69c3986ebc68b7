"""Reading the small JSON files of a model folder (config.json, tokenizer_config.json, ...)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_object(path: Path) -> dict[str, Any]:
    """The file's top-level object; {} when the file is absent or holds no object. A file that is
    there but not JSON is an error naming it: a damaged model folder must not pass for a plain one."""
    if not path.is_file():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    return found if isinstance(found, dict) else {}


def tokenizer_settings(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json over special_tokens_map.json (special tokens, cleanup flags)."""
    return {
        **read_json_object(folder / "special_tokens_map.json"),
        **read_json_object(folder / "tokenizer_config.json"),
    }


def token_content(value: object) -> str | None:
    """A special token as tokenizer configs write it (a string, or an AddedToken mapping with its
    `content`); None when it is neither."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
