"""Where a folder's tokenizer.json is: its own, or the one converted from its slow tokenizer.

Frontends tokenize with the `tokenizers` library alone, from a tokenizer.json. Many checkpoints ship
their tokenizer only in slow form (DeBERTa-v3's spm.model, XLM-R's sentencepiece.bpe.model, an old
BERT's vocab.txt, GPT-2's vocab.json + merges.txt, each with a tokenizer_config.json). The device
converts such a folder once, with transformers' own conversion, while the model loads
(sie.gpu_proc.tokenizer_conversion), and writes the result into sie's own cache, never into the
folder (it may be a Hugging Face snapshot): `<HF cache>/.sie/tokenizers/<name>/<digest>/` holds the
tokenizer.json and copies of the folder's small tokenizer JSON files, so code that reads
tokenizer_config.json beside the tokenizer.json finds it there too. The digest covers the files the
conversion reads and the transformers version that converted them, so a changed folder or an
upgraded transformers gets a conversion of its own.

Nothing here imports transformers: the frontends only look the converted file up.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
from pathlib import Path

TOKENIZER_JSON = "tokenizer.json"
# The slow tokenizer files transformers converts, each group complete or absent.
SLOW_TOKENIZERS = (("spm.model",), ("sentencepiece.bpe.model",), ("vocab.txt",), ("vocab.json", "merges.txt"))
# Without it a folder's vocabulary file is not known to be a tokenizer (and its class is unknown).
TOKENIZER_CONFIG = "tokenizer_config.json"
# Small files that shape the conversion (tokenizer class, special and added tokens); copied beside
# the converted tokenizer.json.
SIDECARS = (TOKENIZER_CONFIG, "special_tokens_map.json", "added_tokens.json", "config.json")
OWN_DIR = Path(".sie") / "tokenizers"  # under the HF cache, beside sie's other files (gpu_proc.hf_cache)
DIGEST_CHARS = 32


def slow_tokenizer_files(folder: Path) -> tuple[str, ...] | None:
    """The slow tokenizer files transformers would convert in `folder`, or None when it has none."""
    if not (folder / TOKENIZER_CONFIG).is_file():
        return None
    for group in SLOW_TOKENIZERS:
        if all((folder / name).is_file() for name in group):
            return group
    return None


def converted_roots(cache: Path) -> tuple[Path, Path]:
    """Where converted tokenizers are kept: under the HF cache, else (a read-only cache) in the
    temporary directory. Looked up in this order, written to the first that takes the write."""
    return cache / OWN_DIR, Path(tempfile.gettempdir()) / f"sie-tokenizers-{os.getuid()}"


def conversion_key(folder: Path) -> Path | None:
    """The relative place of the folder's converted tokenizer under a root (`<name>/<digest>`), or
    None when it has no slow tokenizer."""
    group = slow_tokenizer_files(folder)
    if group is None:
        return None
    digest = hashlib.sha256(_transformers_version().encode())
    for name in (*group, *SIDECARS):
        path = folder / name
        if path.is_file():
            digest.update(f"\0{name}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return Path(_label(folder)) / digest.hexdigest()[:DIGEST_CHARS]


def find_tokenizer_json(folder: Path, cache: Path) -> Path | None:
    """`folder`'s tokenizer.json, else the one converted from its slow tokenizer; None when neither
    is there (no tokenizer, or one the device has not converted yet)."""
    own = folder / TOKENIZER_JSON
    if own.is_file():
        return own
    key = conversion_key(folder)
    if key is None:
        return None
    for root in converted_roots(cache):
        if (root / key / TOKENIZER_JSON).is_file():
            return root / key / TOKENIZER_JSON
    return None


def describe_missing(folder: Path) -> str:
    """Why `folder` offers no tokenizer.json, for an error message."""
    group = slow_tokenizer_files(folder)
    if group is not None:
        return (
            f"{folder} has a slow tokenizer ({' + '.join(group)}) that is not converted yet "
            "(the device converts it when the model loads)"
        )
    slow = " / ".join(" + ".join(g) for g in SLOW_TOKENIZERS)
    return f"{folder} has no {TOKENIZER_JSON}, nor a slow tokenizer ({slow} with {TOKENIZER_CONFIG})"


def _label(folder: Path) -> str:
    """A readable name for the folder: its repository's for a Hub snapshot, else its own."""
    parts = folder.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        name = parts[-3]
    else:
        name = folder.resolve().name or "root"
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def _transformers_version() -> str:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def chat_template(folder: Path) -> str | None:
    """The processor's template (chat_template.jinja / .json), else the tokenizer's; None if none."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "tokenizer_config.json"):
        path = folder / name
        if not path.is_file():
            continue
        found = json.loads(path.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(found, list):  # named templates: the default one
            found = next((t.get("template") for t in found if t.get("name") == "default"), None)
        if isinstance(found, str) and found:
            return found
    return None
