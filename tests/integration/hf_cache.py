"""A Hugging Face cache laid out as huggingface_hub leaves it, for servers that read models by SIE's
ids and pinned revisions without a network."""

from __future__ import annotations

from pathlib import Path


def snapshot_dir(hub: Path, hf_id: str, revision: str) -> Path:
    """The (not yet created) snapshot folder of `hf_id` at `revision` in `hub`, its main branch
    pointing at it."""
    repo = hub / f"models--{hf_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision
