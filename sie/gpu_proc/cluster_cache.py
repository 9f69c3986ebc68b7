"""The cluster cache: a Hugging Face cache on object storage (`models--ORG--NAME/refs/REF` and
`models--ORG--NAME/snapshots/COMMIT/...`, as SIE's tooling uploads it), and copying one snapshot
from it into the local cache.

A copy never looks complete before it is: files arrive as `NAME.part` in an incoming folder on the
local cache's filesystem and are renamed when whole; the folder is renamed to
`snapshots/COMMIT` only when every file is there at its listed size, and the ref is written after
that. A copy cut short (a killed process, a network error) leaves only the incoming folder, and
the next copy of that snapshot keeps its whole files and fetches the rest. The caller holds the
model's lock (sie.gpu_proc.hf_cache.RepoLock), so one process copies a model at a time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sie.gpu_proc.hf_cache import discard, incoming_dir
from sie.model_config import ModelConfigError
from sie.model_location import repo_folder
from sie.object_store import join, open_url

log = logging.getLogger(__name__)

COMMIT = re.compile(r"[0-9a-f]{40}")
# Files fetched at once (a sharded model's shards side by side; the library itself splits a large
# file into ranges fetched side by side).
COPY_THREADS = 4


@dataclass(frozen=True, slots=True)
class RemoteSnapshot:
    hf_id: str
    repo: str  # models--ORG--NAME
    commit: str
    ref: str | None  # the branch or tag that named it, written locally so a lookup by that name finds it
    files: dict[str, int]  # path inside the snapshot -> bytes
    url: str

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    def missing_bytes(self, cache: Path) -> int:
        """Bytes still to fetch, given what an earlier copy cut short left in the incoming folder."""
        incoming = incoming_dir(cache, self.repo, self.commit)
        return sum(size for name, size in self.files.items() if not _whole(incoming / name, size))


class ClusterCache:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = open_url(url)

    def connect(self) -> None:
        """Set up the store's client (credentials, endpoint, a first connection; a third of a second
        for S3) before the first cold load needs it; a store that is not there yet is logged."""
        try:
            if not self.fs.exists(self.root):
                log.warning("the cluster cache does not exist (yet)", extra={"url": self.url})
        except Exception as exc:  # credentials, network: each load will report it again
            log.warning("the cluster cache is not readable", extra={"url": self.url, "error": repr(exc)})

    def find(self, hf_id: str, revision: str | None) -> RemoteSnapshot | None:
        """The snapshot of `hf_id` at `revision` (a commit, a branch or tag with a ref, or None: main),
        or None when the cluster cache does not hold it. ModelConfigError for a cluster cache that
        does not exist or a snapshot missing files; the store's own errors (credentials, network)
        are the library's."""
        self.fs.invalidate_cache()  # listings cached by an earlier miss would hide a model uploaded since
        repo = repo_folder(hf_id)
        base = join(self.root, repo)
        commit, ref = self._commit(repo, revision)
        if commit is None:
            self._check_root()
            return None
        prefix = join(base, "snapshots", commit)
        found = self.fs.find(prefix, detail=True)
        files = {
            name[len(prefix) + 1 :]: int(info["size"])
            for name, info in found.items()
            if info.get("type") == "file" and name.startswith(prefix + "/")
        }
        if not files:
            self._check_root()
            return None
        snapshot = RemoteSnapshot(hf_id, repo, commit, ref, files, f"{self.url}/{repo}/snapshots/{commit}")
        self._check_shards(snapshot, prefix)
        return snapshot

    def copy(self, snapshot: RemoteSnapshot, cache: Path) -> Path:
        """Copy the snapshot into `cache` (under its lock); its local folder."""
        target = cache / snapshot.repo / "snapshots" / snapshot.commit
        if not _holds(target, snapshot.files):
            discard(cache, target)  # a folder another tool left part-filled: never trusted
            started = time.monotonic()
            fetched = self._fetch_missing(snapshot, cache)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(incoming_dir(cache, snapshot.repo, snapshot.commit), target)
            took_s = time.monotonic() - started
            log.info(
                "copied from the cluster cache",
                extra={
                    "model": snapshot.hf_id,
                    "from": snapshot.url,
                    "bytes": fetched,
                    "copy_s": round(took_s, 2),
                    "mb_per_s": round(fetched / 1e6 / max(took_s, 1e-6), 1),
                },
            )
        if snapshot.ref is not None:
            _write_ref(cache / snapshot.repo / "refs" / snapshot.ref, snapshot.commit)
        return target

    # -- inside ------------------------------------------------------------------------------------
    def _commit(self, repo: str, revision: str | None) -> tuple[str | None, str | None]:
        base = join(self.root, repo)
        if revision and COMMIT.fullmatch(revision):
            return revision, None
        ref = revision or "main"
        try:
            return self.fs.cat_file(join(base, "refs", ref)).decode().strip(), ref
        except FileNotFoundError:
            pass
        if revision is not None:
            return None, None
        try:  # no refs/main: one snapshot alone is unambiguous
            names = [path.rstrip("/").rsplit("/", 1)[-1] for path in self.fs.ls(join(base, "snapshots"))]
        except FileNotFoundError:
            return None, None
        if len(names) > 1:
            raise ModelConfigError(
                f"name the revision with hf_revision: {self.url}/{repo} holds "
                f"{len(names)} snapshots and no refs/main"
            )
        return (names[0], "main") if names else (None, None)

    def _check_root(self) -> None:
        """On a miss: a cache that is not there at all is a configuration error, not a miss."""
        if not self.fs.exists(self.root):
            raise ModelConfigError(f"the cluster cache {self.url} does not exist (no such bucket or prefix)")

    def _check_shards(self, snapshot: RemoteSnapshot, prefix: str) -> None:
        """Every shard a weight index names must be in the snapshot: refuse before fetching any."""
        for name in [n for n in snapshot.files if n.endswith(".index.json")]:
            try:
                index = json.loads(self.fs.cat_file(join(prefix, name)))
                shards = set(index.get("weight_map", {}).values())
            except (ValueError, AttributeError) as exc:
                raise ModelConfigError(f"{snapshot.url}/{name} is not a weight index: {exc}") from None
            folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
            missing = sorted(s for s in shards if folder + s not in snapshot.files)
            if missing:
                named = ", ".join(missing)
                raise ModelConfigError(
                    f"re-upload the snapshot: {snapshot.url} lacks files its {name} names: {named}"
                )

    def _fetch_missing(self, snapshot: RemoteSnapshot, cache: Path) -> int:
        incoming = incoming_dir(cache, snapshot.repo, snapshot.commit)
        incoming.mkdir(parents=True, exist_ok=True)
        for part in incoming.rglob("*.part"):
            part.unlink()  # cut short mid-file: fetched again whole
        todo = [(n, size) for n, size in snapshot.files.items() if not _whole(incoming / n, size)]
        prefix = join(self.root, snapshot.repo, "snapshots", snapshot.commit)

        def fetch(item: tuple[str, int]) -> None:
            name, size = item
            dest = incoming / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            part = dest.with_name(dest.name + ".part")
            self.fs.get_file(join(prefix, name), str(part))
            got = part.stat().st_size
            if got != size:
                raise ModelConfigError(f"{snapshot.url}/{name}: copied {got} of its {size} bytes")
            os.rename(part, dest)

        with ThreadPoolExecutor(COPY_THREADS, thread_name_prefix="sie-copy") as pool:
            for _ in pool.map(fetch, todo):
                pass
        return sum(size for _, size in todo)


def _whole(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


def _holds(folder: Path, files: dict[str, int]) -> bool:
    """The folder already has every file at its size (a copy whose ref write was cut short)."""
    return folder.is_dir() and all(_whole(folder / name, size) for name, size in files.items())


def _write_ref(path: Path, commit: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_text(commit)
    os.rename(part, path)
