"""The other Hub repositories a model's load reads besides its own: the code its config's `auto_map`
points into, and what its family names (a GLiNER union's members, the full checkpoint a LoRA folder
adapts). With a cluster cache they are copied into the local cache before the load, like the
model's own snapshot, and the disk cache keeps them while the model is in use.

No torch here: the device's weights source and the YAML tooling both read it.
"""

from __future__ import annotations

import json
from pathlib import Path

from sie.families import FAMILIES
from sie.families.spec import resolve_target
from sie.gte_new_config import loads_natively
from sie.model_config import ModelConfig, ModelConfigError

Repositories = dict[str, str | None]  # Hub id -> revision (None: its main branch)


def companion_repositories(config: ModelConfig, weights_dir: Path) -> Repositories:
    """{hub id: revision} of the repositories besides its own that loading `config` reads."""
    found = code_repositories(weights_dir, config.hf_revision)
    family = FAMILIES.get(config.family)
    if family is not None and family.companions is not None:
        found.update(resolve_target(family.companions)(config, weights_dir))
    found.pop(config.hf_id or "", None)
    return found


def code_repositories(weights_dir: Path, revision: str | None) -> Repositories:
    """The repositories a folder's `auto_map` takes code from (`org/code--module.Class`); none for
    a GTE "new" folder that loads into transformers' own classes, whose code is never run."""
    if loads_natively(weights_dir):
        return {}
    try:
        auto_map = json.loads((weights_dir / "config.json").read_text()).get("auto_map") or {}
    except (OSError, ValueError, AttributeError):
        return {}
    references = [v for value in auto_map.values() for v in (value if isinstance(value, list) else [value])]
    return {str(ref).split("--")[0]: revision for ref in references if ref and "--" in str(ref)}


def lora_base(weights_dir: Path) -> Path | str | None:
    """What a PEFT LoRA folder's adapter_config.json names as its base: a local folder (a Path; a
    relative name is read from the LoRA folder), else a Hub id (a str); None for a folder that is no
    LoRA."""
    config_path = weights_dir / "adapter_config.json"
    if not config_path.is_file():
        return None
    try:
        base = json.loads(config_path.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelConfigError(f"cannot read {config_path}: {exc}") from None
    if not isinstance(base, str) or not base:
        raise ModelConfigError(f"{config_path} names no base_model_name_or_path")
    local = Path(base).expanduser()
    local = local if local.is_absolute() else weights_dir / local
    return local if local.is_dir() else base


def lora_base_repository(config: ModelConfig, weights_dir: Path) -> Repositories:
    """The Hub checkpoint a LoRA folder adapts, at its main branch as SIE loads it."""
    base = lora_base(weights_dir)
    return {base: None} if isinstance(base, str) else {}
