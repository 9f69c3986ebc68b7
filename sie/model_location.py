"""Where a model's files are on this machine: the folder its YAML names (a path, or a folder inside
an installed package), else its snapshot in the Hugging Face cache; and its tokenizer.json."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from sie.families import FAMILIES
from sie.model_config import ModelConfig, ModelConfigError
from sie.tokenizer_files import describe_missing, find_tokenizer_json


def resolve_weights_dir(config: ModelConfig) -> Path:
    """The local folder holding config.json, the weights and tokenizer.json. Downloads only where
    the supervisor allowed it (--hf-fallback)."""
    folder = _declared_folder(config)
    if folder is None:
        if not config.hf_id:
            raise ModelConfigError(
                f"model '{config.sie_id}' names no weights (weights.path/package or hf_id)"
            )
        folder = hf_snapshot(config.hf_id, config.hf_revision)
    if not folder.is_dir():
        raise ModelConfigError(f"model '{config.sie_id}': weights folder {folder} does not exist")
    return folder


def weights_present(config: ModelConfig) -> bool:
    """Whether the model's files are on this machine now (never downloads)."""
    if config.is_weightless:
        return True
    try:
        folder = _declared_folder(config)
        if folder is None and config.hf_id:
            folder = local_snapshot(config.hf_id, config.hf_revision, hf_hub_cache())
    except (ModelConfigError, OSError, ValueError):  # a package not installed, an invalid repo id
        return False
    return folder is not None and folder.is_dir()


def _declared_folder(config: ModelConfig) -> Path | None:
    """The folder the YAML's `weights` block names (a path, or a folder in a package); None: `hf_id`."""
    weights = config.weights
    if weights.path:
        return Path(weights.path).expanduser()
    if weights.package:
        return _package_dir(weights.package) / weights.package_path
    return None


def resolve_tokenizer_file(config: ModelConfig) -> Path:
    """tokenizer.json (or the one converted from a slow tokenizer: sie.tokenizer_files) from the
    model's folder, else from a repository it names as its tokenizer's (the YAML's
    hf_tokenizer_dependencies, then the encoder its checkpoint names: a family's
    `tokenizer_from_encoder`)."""
    own = resolve_weights_dir(config)
    found = find_tokenizer_file(own)
    if found is not None:
        return found
    looked = [own]
    for name, revision in tokenizer_repositories(config, own).items():
        looked.append(repository_dir(name, revision))
        found = find_tokenizer_file(looked[-1])
        if found is not None:
            return found
    reasons = "; ".join(map(describe_missing, looked))
    raise ModelConfigError(f"model '{config.sie_id}': no tokenizer: {reasons}")


def find_tokenizer_file(folder: Path) -> Path | None:
    """The folder's tokenizer.json, or the one converted from its slow tokenizer; None if neither."""
    return find_tokenizer_json(folder, hf_hub_cache())


def folder_tokenizer_file(folder: Path) -> Path:
    """`find_tokenizer_file`, raising the reason when there is none."""
    found = find_tokenizer_file(folder)
    if found is None:
        raise ModelConfigError(f"no tokenizer: {describe_missing(folder)}")
    return found


def tokenizer_repositories(config: ModelConfig, weights_dir: Path) -> dict[str, str | None]:
    """{name: revision} of the repositories (or local folders) the model's tokenizer may come from
    besides its own folder: the YAML's hf_tokenizer_dependencies, then the encoder its checkpoint
    names when its family reads that encoder's tokenizer (GLiREL), at the revision those pin."""
    found: dict[str, str | None] = dict(config.hf_tokenizer_dependencies)
    spec = FAMILIES.get(config.family)
    if spec is not None and spec.tokenizer_from_encoder is not None:
        encoder = named_encoder(weights_dir / spec.tokenizer_from_encoder)
        found.setdefault(encoder, None)
    return found


def named_encoder(checkpoint_config: Path) -> str:
    """The encoder a checkpoint's config names in `model_name` (a Hub id or a local folder)."""
    try:
        raw = yaml.safe_load(checkpoint_config.read_text())  # JSON, read as its packages read it
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"cannot read {checkpoint_config}: {exc}") from None
    name = raw.get("model_name") if isinstance(raw, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ModelConfigError(f"{checkpoint_config} names no encoder (model_name)")
    return name


def repository_dir(name: str, revision: str | None) -> Path:
    """The folder of a tokenizer repository or encoder: `name` itself when it is a local folder (as
    transformers reads it), else its cached snapshot (downloaded only with --hf-fallback)."""
    local = Path(name).expanduser()
    if local.is_dir():
        return local
    return hf_snapshot(name, revision)


def _package_dir(package: str) -> Path:
    # find_spec locates the package without importing it (some model packages import torch).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelConfigError(f"Python package '{package}' holding model weights is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def hf_hub_cache() -> Path:
    """The Hugging Face cache the children read: the supervisor turns SIE_LOCAL_CACHE into HF_HUB_CACHE."""
    from huggingface_hub import constants

    return Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE).expanduser()


def repo_folder(hf_id: str) -> str:
    """huggingface_hub's folder name for a model repository."""
    return "models--" + hf_id.replace("/", "--")


def local_snapshot(hf_id: str, revision: str | None, cache: Path) -> Path | None:
    """The snapshot folder huggingface_hub's own lookup finds in `cache` (never downloads), or None."""
    if not (cache / repo_folder(hf_id)).is_dir():
        return None  # nothing of the repository is cached; spares importing the hub client (0.2 s)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(hf_id, revision=revision, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        return None


def hf_snapshot(hf_id: str, revision: str | None) -> Path:
    """The cached snapshot of `hf_id` at `revision`, found by huggingface_hub's own cache lookup;
    downloaded only when HF_HUB_OFFLINE is off (the supervisor sets it unless --hf-fallback)."""
    from huggingface_hub import snapshot_download

    cache = hf_hub_cache()
    found = local_snapshot(hf_id, revision, cache)
    if found is not None:
        return found
    if _offline():
        at = f"revision {revision}" if revision else "its main branch"
        raise ModelConfigError(
            f"'{hf_id}' ({at}) is not in the local Hugging Face cache {cache}. Start with --hf-fallback "
            "(SIE_HF_FALLBACK=true) to download it, point SIE_LOCAL_CACHE at a cache that holds it, or "
            "put it there with "
            f"`hf download {hf_id}{' --revision ' + revision if revision else ''} --cache-dir {cache}`"
        )
    return Path(snapshot_download(hf_id, revision=revision, cache_dir=cache))


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
