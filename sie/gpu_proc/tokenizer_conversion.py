"""Slow tokenizers converted to tokenizer.json, once, on the device while a model loads.

A frontend tokenizes only after the device reports the model loaded, so converting here, on the
loader thread that already has transformers, means the frontends find every tokenizer.json they
look for (sie.tokenizer_files says where). The conversion is transformers' own: the fast tokenizer
`AutoTokenizer` builds from the folder, exactly what the families' own packages (gliner, glirel)
tokenize with, written out as its backend's tokenizer.json.

Writes are atomic: a temporary folder beside the target, renamed into place; when several
processes convert the same folder at once, the first rename wins and the others drop their copy.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from sie.model_config import ModelConfig, ModelConfigError
from sie.model_location import hf_hub_cache, repository_dir, tokenizer_repositories
from sie.tokenizer_files import (
    SIDECARS,
    TOKENIZER_JSON,
    conversion_key,
    converted_roots,
    find_tokenizer_json,
    slow_tokenizer_files,
)

log = logging.getLogger(__name__)


def convert_tokenizers(config: ModelConfig, weights_dir: Path) -> None:
    """Convert the slow tokenizer of every folder the model's tokenizer may come from: its own and
    its tokenizer repositories. A repository that cannot be had is left for the frontend to name
    (the model may not need it); a slow tokenizer that fails to convert fails the load."""
    if config.is_weightless:
        return
    convert_slow_tokenizer(weights_dir)
    for name, revision in tokenizer_repositories(config, weights_dir).items():
        try:
            folder = repository_dir(name, revision)
        except ModelConfigError as exc:
            log.warning("tokenizer repository not found", extra={"model": name, "error": str(exc)})
            continue
        convert_slow_tokenizer(folder)


def convert_slow_tokenizer(folder: Path, cache: Path | None = None) -> Path | None:
    """The folder's tokenizer.json: its own, an earlier conversion, or one converted now from its
    slow tokenizer; None when it has no tokenizer at all."""
    cache = hf_hub_cache() if cache is None else cache
    found = find_tokenizer_json(folder, cache)
    key = conversion_key(folder)
    if found is not None or key is None:
        return found
    text = _converted_json(folder)
    errors = []
    for root in converted_roots(cache):
        try:
            target = _publish(root / key, folder, text)
        except OSError as exc:  # a read-only cache: the next root
            errors.append(f"{root}: {exc}")
            continue
        log.info("slow tokenizer converted", extra={"model": str(folder), "path": str(target)})
        return target
    raise ModelConfigError(f"could not write the tokenizer converted from {folder}: {'; '.join(errors)}")


def _converted_json(folder: Path) -> str:
    """tokenizer.json of the fast tokenizer transformers builds from the folder, with no truncation
    or padding (each family sets its own)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        backend = tokenizer.backend_tokenizer
    except Exception as exc:  # transformers raises many kinds (ImportError for sentencepiece, ValueError)
        files = " + ".join(slow_tokenizer_files(folder) or ())
        raise ModelConfigError(
            f"{folder} has no {TOKENIZER_JSON} and its slow tokenizer ({files}) could not be converted: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    backend.no_truncation()
    backend.no_padding()
    return str(backend.to_str())


def _publish(target: Path, folder: Path, text: str) -> Path:
    """Write tokenizer.json and the folder's sidecar files into `target` atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
    staging.mkdir()
    try:
        (staging / TOKENIZER_JSON).write_text(text, encoding="utf-8")
        for name in SIDECARS:
            if (folder / name).is_file():
                shutil.copyfile(folder / name, staging / name)
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / TOKENIZER_JSON).is_file():  # not another process's complete copy
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target / TOKENIZER_JSON
