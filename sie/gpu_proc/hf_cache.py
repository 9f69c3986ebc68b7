"""The local Hugging Face cache as this server manages it: the lock that serialises copying and
deleting a model's folder across processes, and what each cached model weighs.

Our own files sit under `<cache>/.sie/`, beside huggingface_hub's `.locks/`: `locks/` (one lock file
per model, never deleted: deleting a lock file races with its next user), `incoming/` (copies under
way, renamed into place when complete) and `trash/` (folders being deleted, moved there first so a
half-deleted snapshot is never seen at its real path).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import uuid
from pathlib import Path

OURS = ".sie"


def incoming_dir(cache: Path, repo: str, commit: str) -> Path:
    """Where a copy of one snapshot is assembled: the same filesystem as its target, so the final
    rename is atomic; the same name every time, so a copy cut short is resumed."""
    return cache / OURS / "incoming" / f"{repo}--{commit}"


class RepoLock:
    """flock(2) on `<cache>/.sie/locks/<repo>.lock`: shared while a model's files are read, exclusive
    while they are copied or deleted. The kernel drops it when its process dies, however it dies."""

    def __init__(self, cache: Path, repo: str) -> None:
        path = cache / OURS / "locks" / f"{repo}.lock"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            self._fd = None  # a read-only cache: nobody copies into it or deletes from it either

    def shared(self) -> None:
        self._flock(fcntl.LOCK_SH)

    def exclusive(self) -> None:
        """Blocks while another process copies or reads the model (a conversion from shared is not
        atomic: another waiter may take the lock in between, so re-check what it guards after)."""
        self._flock(fcntl.LOCK_EX)

    def try_exclusive(self) -> bool:
        try:
            self._flock(fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _flock(self, operation: int) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, operation)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock

    def __enter__(self) -> RepoLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def touch(cache: Path, repo: str) -> None:
    """Mark the model used now: the disk cache evicts the folder touched longest ago first."""
    with contextlib.suppress(OSError):  # a read-only cache: the folder only keeps its LRU position
        os.utime(cache / repo)


def cached_repos(cache: Path) -> list[tuple[str, float]]:
    """(folder name, last use) of every model folder in the cache."""
    found = []
    for entry in cache.glob("models--*"):
        try:
            found.append((entry.name, entry.stat().st_mtime))
        except OSError:
            continue  # removed meanwhile
    return found


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under `path` (links not followed: a blob counts once)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def discard(cache: Path, path: Path) -> None:
    """Delete a folder: first moved to the trash (one rename, atomic), then removed from there."""
    trash = cache / OURS / "trash" / f"{path.name}.{uuid.uuid4().hex[:8]}"
    trash.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)
