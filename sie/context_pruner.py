"""Context pruners: a cross-encoder reranker with a second head that says, token by token, how much
of a passage to keep for a query (SIE's Stablebridge pruner: bge-reranker-v2-m3 and an MLP trained
on its last hidden states).

The head's weights are a torch file of their own (`best.pt`), often in another Hub repository than
the reranker. The profile's `loadtime` says where: `pruning_head_path` (a local file, a local
folder, or a Hub id) and `pruning_head_file` (the file's name in that folder; `best.pt`). With no
path the head is read from the model's own folder. The device reads the file; the weights source
copies its repository from a cluster cache. No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sie.model_config import ModelConfig
from sie.model_location import hf_snapshot

DEFAULT_HEAD_FILE = "best.pt"
# SIE's defaults: a token below the first is pruned, at or above the second highlighted.
DEFAULT_PRUNE_THRESHOLD = 0.6
DEFAULT_HIGHLIGHT_THRESHOLD = 0.9
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True, slots=True)
class HeadLocation:
    path: str | None  # a local file or folder, or a Hub id; None: the model's own folder
    file: str = DEFAULT_HEAD_FILE

    def hub_id(self) -> str | None:
        """The Hub repository the head comes from, when `path` names one and no local path."""
        if self.path is None or Path(self.path).expanduser().exists():
            return None
        return self.path if _HUB_ID.fullmatch(self.path) else None

    def resolve(self, weights_dir: Path) -> Path:
        """The head's file: a local file as named, a file in a local folder or in the cached Hub
        snapshot (its main branch, as SIE reads it), or the model's own folder's."""
        if self.path is None:
            return weights_dir / self.file
        local = Path(self.path).expanduser()
        if local.is_file():
            return local
        if local.is_dir():
            return local / self.file
        hub_id = self.hub_id()
        if hub_id is None:
            raise FileNotFoundError(f"pruning_head_path {self.path!r} is neither a local path nor a Hub id")
        return hf_snapshot(hub_id, None) / self.file


def head_location(config: ModelConfig, profile: str | None = None) -> HeadLocation:
    loadtime = config.profile(profile).adapter_options.loadtime
    path = loadtime.get("pruning_head_path")
    file = loadtime.get("pruning_head_file") or DEFAULT_HEAD_FILE
    if path is not None and not isinstance(path, str):
        raise ValueError(f"loadtime.pruning_head_path {path!r} is not a string")
    if not isinstance(file, str):
        raise ValueError(f"loadtime.pruning_head_file {file!r} is not a string")
    return HeadLocation(path or None, file)


def head_repository(config: ModelConfig, weights_dir: Path) -> dict[str, str | None]:
    """The Hub repository of the default profile's head, for a cluster cache to copy (main branch);
    none for a malformed location, whose load says what is wrong."""
    try:
        hub_id = head_location(config).hub_id()
    except ValueError:
        return {}
    return {hub_id: None} if hub_id else {}
