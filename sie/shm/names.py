"""Names of every shared-memory object sie makes, and removal of those a dead supervisor left.

All names share one prefix, `/sie.<instance>.<supervisor-pid>`. On Linux a segment `/X` is the
file `/dev/shm/X` and a named semaphore `/X` is `/dev/shm/sem.X`, so one directory listing finds
everything a SIGKILLed run left behind. Restarts use new generation numbers, never old names.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

SHM_DIR = "/dev/shm"
log = logging.getLogger(__name__)

_INSTANCE = re.compile(r"[A-Za-z0-9_-]+")
_OURS = re.compile(r"(?:sem\.)?sie\.([A-Za-z0-9_-]+)\.([0-9]+)\..+")
_DIRECTIONS = ("req", "resp")


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (zombies count; another user's too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process; or no pid at all: not ours to sweep
        return True
    return True


@dataclass(frozen=True, slots=True)
class Namespace:
    instance: str
    supervisor_pid: int

    def __post_init__(self) -> None:
        if not _INSTANCE.fullmatch(self.instance):
            raise ValueError(f"instance name {self.instance!r} must match [A-Za-z0-9_-]+")
        if self.supervisor_pid <= 0:
            raise ValueError(f"supervisor pid must be positive, not {self.supervisor_pid}")

    @property
    def prefix(self) -> str:
        return f"/sie.{self.instance}.{self.supervisor_pid}"

    def control(self) -> str:
        return f"{self.prefix}.ctl"

    def stats(self) -> str:
        return f"{self.prefix}.stats"

    def ring(self, device: int, frontend: int, generation: int, direction: str) -> str:
        if direction not in _DIRECTIONS:
            raise ValueError(f"ring direction must be one of {_DIRECTIONS}, not {direction!r}")
        _check_indices(device=device, frontend=frontend, generation=generation)
        return f"{self.prefix}.d{device}.f{frontend}.g{generation}.{direction}"

    def doorbell(self, device: int, generation: int) -> str:
        _check_indices(device=device, generation=generation)
        return f"{self.prefix}.d{device}.g{generation}.bell"


def _check_indices(**indices: int) -> None:
    for key, value in indices.items():
        if value < 0:
            raise ValueError(f"{key} must be >= 0, not {value}")


def sweep_stale(shm_dir: str = SHM_DIR, is_alive: Callable[[int], bool] = pid_alive) -> list[str]:
    """Remove every sie object whose supervisor pid is dead; return the removed file names."""
    verdicts: dict[int, bool] = {}
    doomed = []
    for entry in _listdir(shm_dir):
        match = _OURS.fullmatch(entry)
        if match is None:
            continue
        pid = int(match.group(2))
        if pid not in verdicts:
            verdicts[pid] = is_alive(pid)
        if not verdicts[pid]:
            doomed.append(entry)
    return _remove(shm_dir, doomed)


def remove_namespace(namespace: Namespace, shm_dir: str = SHM_DIR) -> list[str]:
    """Remove every object of one namespace (clean exit); return the removed file names."""
    stem = namespace.prefix.lstrip("/") + "."
    doomed = [e for e in _listdir(shm_dir) if e.startswith(stem) or e.startswith("sem." + stem)]
    return _remove(shm_dir, doomed)


def _listdir(shm_dir: str) -> list[str]:
    try:
        return sorted(os.listdir(shm_dir))
    except FileNotFoundError:
        return []
    except OSError as exc:  # an unreadable /dev/shm: nothing to sweep, and no reason not to start
        log.warning("cannot list %s; stale shared memory is not swept: %s", shm_dir, exc)
        return []


def _remove(shm_dir: str, entries: list[str]) -> list[str]:
    removed, refused = [], []
    for entry in entries:
        try:
            os.unlink(os.path.join(shm_dir, entry))
        except FileNotFoundError:
            continue  # someone else cleaned it up first
        except OSError:
            # Another user's leftovers (/dev/shm is sticky: only the owner may remove them), or
            # not a file at all. Never ours to fix, and never a reason not to start.
            refused.append(entry)
            continue
        removed.append(entry)
    if refused:
        log.warning(
            "left shared memory this user may not remove",
            extra={"names": refused[:10], "count": len(refused)},
        )
    return removed
