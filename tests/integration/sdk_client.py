"""Drive the real `sie-sdk` client against a server; run by the SDK's own Python (.venv-sdk).

    .venv-sdk/bin/python tests/integration/sdk_client.py URL [API_KEY] < actions.json

`actions.json` is a JSON list of `{"op": "encode"|"score"|"extract"|"list_models"|"get_model", ...}`;
encode and extract actions have `model`, `items` (one item or a list) and optional `kwargs` for the
`SIEClient` call; a score action has `model`, `query`, `items` and optional `kwargs`. Images and
audio in items (and in a score's query) are named by file (see `materialize`).
Prints one JSON list to stdout, one entry per action: `{"ok": true, "result": ..., "retries": n,
"elapsed_s": s}` or `{"ok": false, "error": {"type", "types", "code", "status_code", "message"}}`.
numpy arrays become `{"dtype": str, "shape": [...], "values": [...]}`.

This file runs under Python 3.12 with only sie-sdk installed: it must not import sie or tests.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np
from sie_sdk import SIEClient


def to_json(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape), "values": value.tolist()}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    return repr(value)


def materialize(items: Any) -> Any:
    """Media in an action, named by file: an image `{"path": p}` is sent as the path itself,
    `{"pil": p}` as an opened PIL image, `{"bytes": p}` as the file's bytes; audio `{"path": p}` as
    the path. The SDK converts each the way a user's call would."""
    if isinstance(items, list):
        return [materialize(item) for item in items]
    if not isinstance(items, dict):
        return items
    item = dict(items)
    if "images" in item:
        item["images"] = [_image(image) for image in item["images"]]
    if isinstance(item.get("audio"), dict) and "path" in item["audio"]:
        item["audio"] = item["audio"]["path"]
    return item


def _image(spec: dict[str, str]) -> Any:
    if "pil" in spec:
        from PIL import Image

        return Image.open(spec["pil"])
    if "bytes" in spec:
        with open(spec["bytes"], "rb") as fh:
            return fh.read()
    return spec["path"]


def run_action(client: SIEClient, action: dict[str, Any]) -> Any:
    op = action["op"]
    if op in ("encode", "extract"):
        action = {**action, "items": materialize(action["items"])}
    if op == "encode":
        return client.encode(action["model"], action["items"], **action.get("kwargs", {}))
    if op == "score":
        query, items = materialize(action["query"]), materialize(action["items"])
        return client.score(action["model"], query, items, **action.get("kwargs", {}))
    if op == "extract":
        return client.extract(action["model"], action["items"], **action.get("kwargs", {}))
    if op == "list_models":
        return client.list_models()
    if op == "get_model":
        return client.get_model(action["model"])
    raise ValueError(f"unknown op {op!r}")


def main() -> int:
    url = sys.argv[1]
    api_key = sys.argv[2] if len(sys.argv) > 2 else None  # sent as `Authorization: Bearer <key>`
    actions = json.load(sys.stdin)
    out = []
    with SIEClient(url, timeout_s=120, api_key=api_key) as client:
        for action in actions:
            start = time.monotonic()
            try:
                result = run_action(client, action)
                entry = {"ok": True, "result": to_json(result)}
            except Exception as exc:
                entry = {
                    "ok": False,
                    "error": {
                        "type": type(exc).__name__,
                        "types": [cls.__name__ for cls in type(exc).__mro__],
                        "code": getattr(exc, "code", None),
                        "status_code": getattr(exc, "status_code", None),
                        "message": str(exc),
                    },
                }
            if action["op"] in ("encode", "score", "extract"):  # the SDK resets its count per call
                entry["retries"] = client.last_retry_count
            entry["elapsed_s"] = round(time.monotonic() - start, 3)
            out.append(entry)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
