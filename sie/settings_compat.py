"""SIE's own environment names, for operators who bring their SIE environment files along.

Three tables, each entry with its reason:
- ALIASES: SIE's name for one of our settings (`SIE_MODEL_FILTER` is our `--models`). Our own
  `SIE_<FIELD>` name wins when both are set; a flag wins over both.
- REJECTED: SIE settings for machinery this server does not have (the queue-mode sidecar, NATS,
  the gateway). Starting anyway would silently serve differently, so start-up stops
  and says why.
- SATISFIED: SIE settings whose purpose holds here without doing anything; accepted, logged once.
Any other `SIE_*` variable is not ours: a warning at start-up names it (and the nearest real one).
`sie.settings` applies these; this module only holds the tables and reads the mapping it is given.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping

_TRUE = {"1", "true", "yes", "on"}


def _log_json(value: str) -> str:
    return "json" if value.strip().lower() in _TRUE else "text"


# field -> [(SIE's variable, how its value becomes ours)]
ALIASES: dict[str, list[tuple[str, Callable[[str], str]]]] = {
    "models": [("SIE_MODEL_FILTER", str)],
    "preload": [("SIE_PRELOAD_MODELS", str)],
    "max_batch_tokens": [("SIE_MAX_BATCH_COST", str)],
    "auth_tokens": [("SIE_AUTH_TOKEN", str)],
    "log_format": [("SIE_LOG_JSON", _log_json)],
    "torch_threads": [("SIE_TORCH_NUM_THREADS", str)],
    # SIE's tokenizing/preprocessing pool is our frontend processes (each preprocesses its own
    # requests); its image pool is our image-decoding threads, which each frontend has.
    "frontends": [("SIE_PREPROCESSOR_WORKERS", str)],
    "media_threads": [("SIE_IMAGE_WORKERS", str)],
}

_NO_QUEUE = (
    "sie has no queue mode: it serves HTTP itself; put HAProxy in front of several servers "
    "(README, Scaling out)"
)
_NO_GATEWAY = (
    "sie has no gateway: HAProxy with deploy/haproxy.cfg routes models to servers (README, Scaling out)"
)
REJECTED: dict[str, str] = {
    "SIE_IPC_SOCKET_PATH": "the queue-mode sidecar socket: " + _NO_QUEUE,
    "SIE_IPC_STALE_AFTER_MS": "the queue-mode sidecar: " + _NO_QUEUE,
    "SIE_IPC_REQUIRE_HEARTBEAT": "the queue-mode sidecar: " + _NO_QUEUE,
    "SIE_NAK_DELAY_S": "NATS redelivery: " + _NO_QUEUE,
    "SIE_OOM_NAK_DELAY_S": "NATS redelivery: " + _NO_QUEUE,
    "SIE_WORKER_ID": "a queue worker's identity: " + _NO_QUEUE,
    "SIE_POOL": "gateway worker pools: " + _NO_GATEWAY,
    "SIE_MACHINE_PROFILE": "gateway machine profiles: " + _NO_GATEWAY,
    "SIE_THRESHOLD_ROUTING_ENABLED": "gateway routing: " + _NO_GATEWAY,
    "SIE_UPSTREAMS_FILE": "remote (upstream) profiles are not supported: every model runs on this box",
    "SIE_REMOTE_SERVING": "remote (upstream) profiles are not supported: every model runs on this box",
    "SIE_BUNDLE": "bundles are not supported: serve a models directory (SIE_MODELS_DIR, SIE_MODEL_FILTER)",
    "SIE_DEVICES": "name devices in SIE_DEVICE instead (cuda, cuda:0,1, cpu)",
    "SIE_METRICS_ENABLED": "there is no OTLP metrics push: scrape GET /metrics (Prometheus) instead",
}
REJECTED_PREFIXES: dict[str, str] = {
    "SIE_NATS_": "NATS work queues: " + _NO_QUEUE,
    "SIE_GATEWAY_": "the SIE gateway: " + _NO_GATEWAY,
}
SATISFIED: dict[str, str] = {
    "SIE_TELEMETRY_DISABLED": "sie sends no telemetry anywhere",
    "SIE_TELEMETRY_URL": "sie sends no telemetry anywhere",
}
# Read by tests and benchmarks, not settings (sie.shm.ring's pause hook, tests' own switches).
INTERNAL_PREFIXES = ("SIE_TEST_", "SIE_SHM_TEST_")


def rejected(environ: Mapping[str, str]) -> list[str]:
    """One message per SIE setting in `environ` that this server refuses to run with."""
    found = []
    for name in sorted(environ):
        reason = REJECTED.get(name) or next(
            (why for prefix, why in REJECTED_PREFIXES.items() if name.startswith(prefix)), None
        )
        if reason is not None:
            found.append(f"{name} is not supported: {reason}")
    return found


def notices(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """Start-up warnings: SIE settings that need nothing here, and `SIE_*` names nobody reads."""
    known = set(known) | {name for aliases in ALIASES.values() for name, _ in aliases}
    messages = []
    for name in sorted(environ):
        if not name.startswith("SIE_") or name in known or name.startswith(INTERNAL_PREFIXES):
            continue
        if name in SATISFIED:
            messages.append(f"{name} has nothing to do here: {SATISFIED[name]}")
        elif name not in REJECTED:
            near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
            hint = f"; did you mean {near[0]}?" if near else ""
            messages.append(f"unknown setting {name} is ignored{hint}")
    return messages


def alias_value(field: str, environ: Mapping[str, str]) -> str | None:
    for name, convert in ALIASES.get(field, []):
        if name in environ:
            return convert(environ[name])
    return None


def alias_names(field: str) -> list[str]:
    return [name for name, _ in ALIASES.get(field, [])]
