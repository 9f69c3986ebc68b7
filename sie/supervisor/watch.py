"""Noticing that the models directory changed: a cheap stat of its YAML files every few seconds.

Polling, not inotify: it works the same on every filesystem (network mounts, bind mounts into
containers), and a few dozen `stat` calls every two seconds cost nothing measurable.
"""

from __future__ import annotations

import time
from pathlib import Path

from sie.catalog import BUILTIN_MODELS_DIR

POLL_S = 2.0

Signature = tuple[tuple[str, int, int], ...]


class ModelsDirWatch:
    def __init__(self, models_dir: str | None, poll_s: float = POLL_S) -> None:
        self.directory = Path(models_dir) if models_dir else BUILTIN_MODELS_DIR
        self.poll_s = poll_s
        self._due_s = time.monotonic() + poll_s
        self._signature = self._scan()

    def changed(self) -> bool:
        """True once after the directory's YAML files (names, sizes, modification times) changed."""
        now = time.monotonic()
        if now < self._due_s:
            return False
        self._due_s = now + self.poll_s
        signature = self._scan()
        if signature == self._signature:
            return False
        self._signature = signature
        return True

    def _scan(self) -> Signature:
        found: list[tuple[str, int, int]] = []
        try:
            for path in self.directory.glob("*.yaml"):
                try:
                    stat = path.stat()
                except OSError:
                    continue  # removed between the listing and the stat
                found.append((path.name, stat.st_mtime_ns, stat.st_size))
        except OSError:
            return ()
        return tuple(sorted(found))
