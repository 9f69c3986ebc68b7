"""Room on the local cache's disk for a copy from the cluster cache.

Before a copy of `need` bytes: with the disk cache enabled, delete the least recently used cached
models (never one in use: loaded or loading on any device, preloaded, a tokenizer repository of
one of those, or locked because another process copies or reads it) until the disk's use plus
`need` is under the threshold. Enabled or not, a copy that cannot fit on the disk at all fails
first with the reason, instead of filling the disk and failing part way.

Use is the filesystem's (statvfs), or, with `capacity_bytes` set, the cache's own files measured
against that many bytes: a quota for the cache on a shared disk, and how the tests fill a "disk".
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Collection
from pathlib import Path

from sie.gpu_proc.hf_cache import OURS, RepoLock, cached_repos, discard, tree_bytes
from sie.model_config import ModelConfigError

log = logging.getLogger(__name__)
MB = 1e6


class DiskCache:
    def __init__(
        self,
        cache: Path,
        *,
        enabled: bool,
        threshold_percent: float = 85.0,
        capacity_bytes: int | None = None,
    ) -> None:
        self.cache = cache
        self.enabled = enabled
        self.threshold = threshold_percent / 100
        self.capacity_bytes = capacity_bytes
        self.evictions = 0

    def usage(self) -> tuple[int, int]:
        """(bytes used, capacity) of the disk the cache is on."""
        if self.capacity_bytes is not None:
            return tree_bytes(self.cache), self.capacity_bytes
        stat = os.statvfs(self.cache)
        capacity = stat.f_blocks * stat.f_frsize
        return capacity - stat.f_bavail * stat.f_frsize, capacity

    def make_room(self, need: int, keep: Collection[str], what: str) -> None:
        """Make room for `need` more bytes of `what`; ModelConfigError if they cannot fit at all."""
        self.cache.mkdir(parents=True, exist_ok=True)
        for leftover in (self.cache / OURS / "trash").glob("*"):  # of a process that died deleting it
            shutil.rmtree(leftover, ignore_errors=True)
        used, capacity = self.usage()
        limit = int(capacity * self.threshold)
        if self.enabled and used + need > limit:
            for repo, _last_used in sorted(cached_repos(self.cache), key=lambda pair: pair[1]):
                if repo in keep:
                    continue
                if self._evict(repo, what):
                    used, capacity = self.usage()
                    if used + need <= limit:
                        break
        if used + need > capacity:
            remedy = (
                "every cached model is in use: free space or raise the capacity"
                if self.enabled
                else "free space, or set SIE_DISK_CACHE_ENABLED=true to let the server delete the least "
                "recently used cached models"
            )
            raise ModelConfigError(
                f"{remedy}; no room for {what} in {self.cache}: it needs {need / MB:.1f} MB and "
                f"{(capacity - used) / MB:.1f} MB of {capacity / MB:.1f} MB are free"
            )
        if self.enabled and used + need > limit:
            log.warning(
                "copying over the disk threshold: every other cached model is in use",
                extra={"model": what, "used_bytes": used, "need_bytes": need, "limit_bytes": limit},
            )

    def _evict(self, repo: str, why: str) -> bool:
        """Delete one model's folder (and any copy of it cut short) unless a process holds its lock."""
        with RepoLock(self.cache, repo) as lock:
            if not lock.try_exclusive():
                return False
            freed = tree_bytes(self.cache / repo)
            discard(self.cache, self.cache / repo)
            for leftover in (self.cache / OURS / "incoming").glob(f"{repo}--*"):
                discard(self.cache, leftover)
        self.evictions += 1
        log.info("evicting cached model from disk", extra={"repo": repo, "bytes": freed, "to_fit": why})
        return True
