"""Write the built-in catalog (`sie/models/`) from an SIE models directory, in our own format.

    python scripts/write_builtin_catalog.py SIE_MODELS_DIR [--out sie/models]

Every SIE model id this server can serve becomes one YAML file of ours holding the facts that
matter here (ids, pinned revision, dims, templates, instructions, pooling, lengths, profiles);
SIE's engine tuning is left behind. Files already in the output directory that are not written by
this script (the hand-written built-ins with packaged weights) are kept, and their ids skipped.
SIE's files come in the `sie-server` wheel: `pip download --no-deps sie-server==0.10.1`, unzip,
`sie_server/models/`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from sie.catalog import BUILTIN_MODELS_DIR
from sie.model_config import ModelConfigError, load_model_file, parse_model_config
from sie.sie_yaml import is_sie_format, translate

MARK = "# Written by scripts/write_builtin_catalog.py from SIE's catalog entry for this id."


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("sie_models_dir", type=Path)
    parser.add_argument("--out", type=Path, default=BUILTIN_MODELS_DIR)
    args = parser.parse_args()
    hand_written = {
        load_model_file(p).sie_id
        for p in args.out.glob("*.yaml")
        if MARK not in p.read_text().splitlines()[:1]
    }
    for stale in args.out.glob("*.yaml"):
        if stale.read_text().startswith(MARK):
            stale.unlink()
    written = 0
    for path in sorted(args.sie_models_dir.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if not isinstance(raw, dict) or not is_sie_format(raw):
            continue
        try:
            ours = _ours(translate(raw, str(path)))
            parse_model_config(ours, str(path))  # what we write must load
        except ModelConfigError:
            continue
        if ours["sie_id"] in hand_written:
            continue
        target = args.out / (ours["sie_id"].replace("/", "__") + ".yaml")
        target.write_text(MARK + "\n" + yaml.safe_dump(ours, sort_keys=False, allow_unicode=True))
        written += 1
    print(f"wrote {written} models to {args.out} (kept {len(hand_written)} hand-written)", file=sys.stderr)
    return 0


def _ours(translated: dict[str, Any]) -> dict[str, Any]:
    """The translation without its notes about SIE's tuning, and without empty values."""
    translated = {k: v for k, v in translated.items() if k != "notes"}
    return _pruned(translated)


# A null inside these means something, and so does an empty one (`muvera: {}` turns MUVERA on).
_VERBATIM = frozenset({"muvera", "muvera_config", "smve", "smve_config"})


def _pruned(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: v if k in _VERBATIM else _pruned(v) for k, v in value.items()}
        return {
            k: v
            for k, v in kept.items()
            if (v is not None and v != {}) or k in ("score", "extract") or (k in _VERBATIM and v == {})
        }
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


if __name__ == "__main__":
    sys.exit(main())
