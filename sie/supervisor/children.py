"""Starting child processes by argv, and the restart policy for the ones that die."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sie.settings import Settings

RESTART_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
STABLE_AFTER_S = 60.0
MAX_RAPID_RESTARTS = 8


@dataclass(slots=True)
class Child:
    """One device or frontend slot: the process in it now and its restart history."""

    role: str  # "device" or "frontend"
    index: int
    process: subprocess.Popen[bytes] | None = None
    started_s: float = 0.0
    rapid_restarts: int = 0
    restart_at_s: float | None = None
    restarts: int = field(default=0)

    @property
    def name(self) -> str:
        return f"{self.role}{self.index}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, settings: Settings, spec_json: str, pass_fds: tuple[int, ...]) -> None:
        argv = [sys.executable, "-m", "sie", f"_{self.role}", settings.encode(), spec_json]
        self.process = subprocess.Popen(argv, pass_fds=pass_fds, env=_child_env(self.role, settings))
        self.started_s = time.monotonic()
        self.restart_at_s = None

    def schedule_restart(self, now: float) -> bool:
        """Plan the next start with backoff; False when it keeps dying and we should give up."""
        self.rapid_restarts = 0 if now - self.started_s > STABLE_AFTER_S else self.rapid_restarts + 1
        if self.rapid_restarts > MAX_RAPID_RESTARTS:
            return False
        delay = RESTART_BACKOFF_S[min(self.rapid_restarts, len(RESTART_BACKOFF_S) - 1)]
        self.restart_at_s = now + delay
        self.restarts += 1
        return True


def _child_env(role: str, settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(hub_environment(settings))
    if role == "frontend":
        # Each frontend is one core's worth of work; Rust tokenizer thread pools would oversubscribe.
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        env.setdefault("RAYON_NUM_THREADS", "1")
    return env


def resolve_devices(spec: str) -> list[str]:
    """`auto | cpu | cuda | cuda:N | cuda:0,1` (and `cpu,cpu` for several CPU devices in tests)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if parts == ["auto"]:
        gpus = visible_gpu_count()
        return [f"cuda:{i}" for i in range(gpus)] or ["cpu"]
    devices: list[str] = []
    for part in parts:
        if part == "cuda":
            devices += [f"cuda:{i}" for i in range(visible_gpu_count())]
        elif part == "cpu" or (part.startswith("cuda:") and part[5:].isdigit()):
            devices.append(part)
        elif part.isdigit():
            devices.append(f"cuda:{part}")
        else:
            raise ValueError(f"unknown device '{part}' (use auto, cpu, cuda, cuda:N)")
    if not devices:
        raise ValueError(f"--device {spec!r} names no device (is a GPU visible?)")
    return devices


MAX_DEFAULT_FRONTENDS = 32
CORES_PER_GPU = 2


def frontend_count(asked: int | None, devices: list[str], cores: int) -> int:
    """The frontends to start: as asked, else 2 where the forward runs on the CPU (it shares the
    cores with them; two measured best on two cores), else every core but two per GPU, from 2 to
    32: a GPU device process keeps about two busy (its loop, its inference thread, the driver's
    wait), and a single-item request costs a frontend about a millisecond of CPU, so with small
    models the frontends are what caps a GPU box (on 16 cores with an H200, 14 frontends served
    10,900 MiniLM requests/s where 8 served 6,800)."""
    if asked is not None:
        return asked
    if all(device == "cpu" for device in devices):
        return 2
    return max(2, min(MAX_DEFAULT_FRONTENDS, cores - CORES_PER_GPU * len(devices)))


def visible_gpu_count() -> int:
    """GPUs the NVIDIA driver exposes, honouring CUDA_VISIBLE_DEVICES, without importing CUDA."""
    try:
        present = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return present
    return min(present, len([v for v in visible.split(",") if v.strip() and v.strip() != "-1"]))


def hub_environment(settings: Settings) -> dict[str, str]:
    """SIE_LOCAL_CACHE / SIE_HF_FALLBACK as Hugging Face's own variables, for the children.

    Weights come from the local cache only (HF_HUB_OFFLINE=1) unless the Hub is allowed: a box in
    production should not start downloading gigabytes because a model id changed.
    """
    env = {"HF_HUB_OFFLINE": "0" if settings.hf_fallback else "1"}
    if settings.local_cache:
        cache = Path(settings.local_cache).expanduser()
        # An HF_HOME-style folder keeps its models under hub/; a hub cache holds models--* itself.
        env["HF_HUB_CACHE"] = str(cache / "hub" if (cache / "hub").is_dir() else cache)
    return env
