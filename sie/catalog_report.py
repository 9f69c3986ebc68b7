"""`python -m sie catalog [DIR|URL]`: which models a models directory serves here, and why not the rest.

Reads the directory exactly as `serve` does (our YAML or SIE's), loads no weights, and prints one
line per model id, then the totals. `--notes` adds each served model's notes (SIE fields that have
no effect here, profiles left out); `--json` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import msgspec

from sie.catalog import BUILTIN_MODELS_DIR, Catalog
from sie.model_config import ModelConfigError

logger = logging.getLogger("sie.catalog")


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser(
        "catalog",
        help="list which models a models directory serves here, and why not the others",
        description="Read a models directory (ours or SIE's) as `serve` would and report, per model "
        "id, served or unsupported with the reason. Loads no weights.",
    )
    where = f"a folder or an s3:// gs:// URL; default: {BUILTIN_MODELS_DIR}"
    parser.add_argument("models_dir", nargs="?", default=None, help=where)
    parser.add_argument("--notes", action="store_true", help="also print each served model's notes")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    from sie.supervisor.catalog_source import CatalogSource  # deferred: the supervisor imports this module

    try:
        catalog = CatalogSource(args.models_dir, None, watch=False).read()
    except ModelConfigError as exc:
        print(f"sie: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(msgspec.json.encode(report(catalog)).decode() + "\n")
    else:
        sys.stdout.write("\n".join(text_lines(catalog, notes=args.notes)) + "\n")
    return 0


def report(catalog: Catalog) -> dict[str, object]:
    served = {m.sie_id: {"family": m.family, "notes": m.notes} for m in catalog.models}
    unsupported = {u.sie_id: {"reason": u.reason, "source": u.source} for u in catalog.unsupported.values()}
    return {
        "served": served,
        "unsupported": unsupported,
        "totals": {
            "served": len(served),
            "unsupported": len(unsupported),
            "all": len(served) + len(unsupported),
        },
    }


def text_lines(catalog: Catalog, *, notes: bool = False) -> list[str]:
    rows: list[tuple[str, str]] = []
    for model in catalog.models:
        rows.append((model.sie_id, f"served       {model.family}"))
        if notes:
            rows.extend(("", f"    note: {note}") for note in model.notes)
    for unsupported in catalog.unsupported.values():
        rows.append((unsupported.sie_id, f"unsupported  {_short(unsupported.reason)}"))
    width = max((len(name) for name, _ in rows), default=0)
    lines = [f"{name:<{width}}  {what}" if name else what for name, what in rows]
    total = len(catalog.models) + len(catalog.unsupported)
    lines.append(f"{len(catalog.models)} served, {len(catalog.unsupported)} unsupported, {total} in all")
    return lines


def log_catalog(catalog: Catalog) -> None:
    """At start, once: what the directory holds that is not served, and what has no effect here."""
    for unsupported in catalog.unsupported.values():
        logger.warning("model '%s' is not served: %s", unsupported.sie_id, _short(unsupported.reason))
    for model in catalog.models:
        for note in model.notes:
            logger.info("model '%s': %s", model.sie_id, note)


def _short(reason: str) -> str:
    """A reason without the file path that prefixes load errors (the path is in --json)."""
    head, sep, rest = reason.partition(": ")
    shown = rest if sep and Path(head).suffix == ".yaml" else reason
    return " ".join(shown.split())  # one line, whatever the YAML parser's message looked like
