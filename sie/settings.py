"""Settings: one frozen object, built once from CLI flags > `SIE_*` environment > defaults.

This is the only module that reads the environment for configuration. Children receive the
settings encoded as JSON on their argv and never read `SIE_*` themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

MIB = 1 << 20
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8080
    frontends: int = 2
    device: str = "auto"
    models_dir: str | None = None
    models: list[str] | None = None
    preload: list[str] | None = None
    default_model: str = DEFAULT_MODEL
    max_batch_requests: int = 64
    max_batch_wait_ms: float = 10.0
    max_concurrent_requests: int = 512
    max_request_body_bytes: int = 34 * MIB
    request_timeout_s: float = 300.0
    graceful_timeout_s: float = 30.0
    drain_delay_s: float = 0.0
    log_format: Literal["text", "json"] = "text"
    log_level: str = "info"
    instance: str = "main"
    ring_slots: int = 256
    request_ring_bytes: int = 16 * MIB
    response_ring_bytes: int = 16 * MIB
    torch_threads: int | None = None

    def encode(self) -> str:
        return msgspec.json.encode(self).decode()

    @staticmethod
    def decode(text: str) -> Settings:
        return msgspec.json.decode(text, type=Settings)


# Help text for every knob; the CLI and the env twins are generated from this table.
HELP: dict[str, str] = {
    "host": "address to listen on",
    "port": "port to listen on (0 picks a free one)",
    "frontends": "number of HTTP frontend processes",
    "device": "auto | cpu | cuda | cuda:N | cuda:0,1 (auto: every visible GPU, else one CPU device)",
    "models_dir": "directory of model YAML files (default: the built-in models)",
    "models": "comma-separated model ids to serve (default: every model in the directory)",
    "preload": "comma-separated model ids to load at start (default: the default model)",
    "default_model": "model preloaded when --preload is not given",
    "max_batch_requests": "most items in one forward batch",
    "max_batch_wait_ms": "longest an item waits for a fuller batch while the device is busy",
    "max_concurrent_requests": "pending items admitted per model before 503 QUEUE_FULL",
    "max_request_body_bytes": "largest request body; larger gets 413",
    "request_timeout_s": "backstop: longest a frontend waits on a device for one request",
    "graceful_timeout_s": "how long SIGTERM waits for in-flight requests",
    "drain_delay_s": "on SIGTERM, answer /readyz 503 but keep serving this long before draining "
    "(behind a balancer: its fall x inter + 1 s, e.g. 3)",
    "log_format": "text | json",
    "log_level": "debug | info | warning | error",
    "instance": "this server's name: in shared-memory names, the X-SIE-Instance header and /v1/models "
    "(give each server on a box its own)",
    "ring_slots": "slots per shared-memory ring",
    "request_ring_bytes": "arena bytes per request ring (one per frontend and device)",
    "response_ring_bytes": "arena bytes per response ring",
    "torch_threads": "torch intra-op threads on a CPU device (default: available cores)",
}

_LIST_FIELDS = {"models", "preload"}


def env_name(field: str) -> str:
    return "SIE_" + field.upper()


def load_settings(cli: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """Merge CLI values (None = not given) over `SIE_*` variables over defaults; validate."""
    raw: dict[str, Any] = {}
    for field in Settings.__struct_fields__:
        value = cli.get(field)
        if value is None and env_name(field) in environ:
            value = environ[env_name(field)]
        if value is None:
            continue
        raw[field] = _split_list(value) if field in _LIST_FIELDS else value
    try:
        settings = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid setting: {exc}") from None
    _validate(settings)
    return settings


def _split_list(value: Any) -> list[str] | None:
    if isinstance(value, list):
        return value
    items = [part.strip() for part in str(value).split(",") if part.strip()]
    return items or None


def _validate(settings: Settings) -> None:
    if settings.frontends < 1:
        raise ValueError("frontends must be at least 1")
    if not 0 <= settings.port < 65536:
        raise ValueError("port must be in 0..65535")
    if settings.max_batch_requests < 1 or settings.max_concurrent_requests < 1:
        raise ValueError("batch and admission limits must be positive")
    if settings.drain_delay_s < 0:
        raise ValueError("drain_delay_s must be >= 0")


def available_cores() -> int:
    return len(os.sched_getaffinity(0))
