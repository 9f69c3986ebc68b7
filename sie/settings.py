"""Settings: one frozen object, built once from CLI flags > `SIE_*` environment > defaults.

This is the only module that reads the environment for configuration. Children receive the
settings encoded as JSON on their argv and never read `SIE_*` themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from sie.settings_compat import alias_names, alias_value, notices, rejected

MIB = 1 << 20
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8080
    frontends: int | None = None  # None: chosen from the devices and cores (sie.supervisor.children)
    device: str = "auto"
    models_dir: str | None = None
    watch_models_dir: bool = True
    spare_model_slots: int = 256
    models: list[str] | None = None
    preload: list[str] | None = None
    default_model: str = DEFAULT_MODEL
    max_batch_requests: int = 64
    max_batch_wait_ms: float = 0.0
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
    cpu_linear: Literal["auto", "onednn", "torch"] = "auto"
    cuda_graphs: bool = True
    event_loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    listen_backlog: int = 2048
    rebalance_connections: bool = True
    frontend_nice: int = 5
    # Images and audio (sie.frontend.media): each limit is a 400 before any large allocation.
    max_image_pixels: int = 50_000_000
    max_images_per_item: int = 16
    max_audio_seconds: float = 600.0
    media_threads: int = 2
    # Model lifecycle and device memory (sie.gpu_proc.memory); names follow SIE's where it has one.
    memory_pressure_threshold_percent: float = 85.0
    device_memory_bytes: int | None = None
    idle_evict_s: float | None = None
    load_failure_cooldown_s: float = 60.0
    max_loras_per_model: int = 10
    device_stall_s: float = 30.0
    replica_queue_depth: int = 64
    replica_after_s: float = 5.0
    # Operations (README "Operating it"). Flags keep our names; SIE's env names work too
    # (sie.settings_compat), and --help shows both.
    max_batch_tokens: int | None = None
    auth_tokens: list[str] | None = None
    auth_token_file: str | None = None
    metrics_auth: bool = False
    tracing_enabled: bool = False
    instrumentation: bool = False
    attention_backend: Literal["auto", "flash_attention_2", "sdpa", "eager"] = "auto"
    default_compute_precision: Literal["float16", "bfloat16", "float32"] | None = None
    local_cache: str | None = None
    hf_fallback: bool = False
    # Weights from object storage (sie.gpu_proc.weights) and the local disk they are copied to.
    cluster_cache: str | None = None
    disk_cache_enabled: bool = False
    disk_pressure_threshold_percent: float = 85.0
    local_cache_bytes: int | None = None

    def encode(self) -> str:
        # Children get this on argv, which every local user can read in /proc: never the tokens
        # (frontends get those through an inherited memfd, see sie.bearer_tokens).
        return msgspec.json.encode(msgspec.structs.replace(self, auth_tokens=None)).decode()

    @staticmethod
    def decode(text: str) -> Settings:
        return msgspec.json.decode(text, type=Settings)


# Help text for every knob; the CLI and the env twins are generated from this table.
HELP: dict[str, str] = {
    "host": "address to listen on",
    "port": "port to listen on (0 picks a free one)",
    "frontends": "number of HTTP frontend processes, each tokenizing and decoding its own requests "
    "(default: 2 on a CPU device; with GPUs, the cores less two per GPU, from 2 to 32)",
    "device": "auto | cpu | cuda | cuda:N | cuda:0,1 (auto: every visible GPU, else one CPU device)",
    "models_dir": "directory of model YAML files, or an s3:// gs:// file:// URL of one, read at start and "
    "on SIGHUP (default: the built-in models)",
    "watch_models_dir": "apply YAML files added, changed or removed in the models directory while "
    "running (SIGHUP re-reads it either way)",
    "spare_model_slots": "models that may be added or changed while running before a restart is needed",
    "models": "comma-separated model ids to serve (default: every model in the directory)",
    "preload": "comma-separated model ids to load at start (default: the default model)",
    "default_model": "model preloaded when --preload is not given",
    "max_batch_requests": "most items in one forward batch",
    "max_batch_wait_ms": "longest an item waits for batch-mates before its batch runs (0: run at once; "
    "items that arrive while a batch runs always join the next one)",
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
    "torch_threads": "torch intra-op threads on a CPU device, fixed (default: per batch, one for a "
    "light batch, else every core)",
    "cpu_linear": "linear layers of a CPU device's models: onednn or torch's own (MKL); auto: oneDNN "
    "where a start-up probe finds it at least 1.25x faster (AMD CPUs)",
    "cuda_graphs": "on a GPU, replay the padding-free forwards (BERT-family encoders, Qwen/Mistral/Llama "
    "decoders) and CLIP's image tower from CUDA graphs captured per batch-shape bucket instead of "
    "launching each kernel",
    "event_loop": "frontend event loop: uvloop (auto: when installed) or asyncio",
    "listen_backlog": "connections the kernel queues on the listening socket before the frontends "
    "accept them",
    "rebalance_connections": "a frontend carrying well over its share of the in-flight requests, while "
    "another carries well under, now and then answers with `connection: close` so the client "
    "reconnects to an idle frontend",
    "frontend_nice": "how much lower the frontends' CPU priority is than the device's (a nice "
    "increment, 0-19): when the cores are short, the device's batches go first",
    "max_image_pixels": "largest image (width x height, read from its header) before 400",
    "max_images_per_item": "most images one item may carry",
    "max_audio_seconds": "longest audio one item may carry",
    "media_threads": "threads per frontend that decode images and audio (more contend for the GIL; "
    "SIE_IMAGE_WORKERS sets this per frontend)",
    "memory_pressure_threshold_percent": "evict the least recently used model when a device's memory "
    "use would cross this share of its capacity",
    "device_memory_bytes": "treat each device as having this many bytes (default: measured; set it to "
    "share a GPU, or to bound what the models on a CPU device hold)",
    "idle_evict_s": "unload a model unused this long (default: never; preloaded models stay)",
    "load_failure_cooldown_s": "after a failed load answer 502 this long, then retry on the next request",
    "max_loras_per_model": "LoRA adapters kept loaded per model (least recently used unloaded first)",
    "device_stall_s": "restart a device process whose loop has not beaten this long",
    "replica_queue_depth": "load a model on another device too when this many items stay queued for it",
    "replica_after_s": "how long the queue must stay that deep before a replica is placed",
    "max_batch_tokens": "server-wide token budget per forward batch for models whose YAML sets none",
    "auth_tokens": "comma-separated bearer tokens; every API route then needs `Authorization: Bearer "
    "<token>` (prefer the env or --auth-token-file: flags show in `ps`)",
    "auth_token_file": "file of bearer tokens, one per line (# comments); adds to --auth-token",
    "metrics_auth": "true: /metrics needs a token too (probes never do)",
    "tracing_enabled": "OpenTelemetry spans per request, exported as the standard OTEL_* variables say "
    "(pip install 'sie[tracing]')",
    "instrumentation": "log one line of statistics per forward batch",
    "attention_backend": "auto | flash_attention_2 | sdpa | eager (auto: flash_attention_2 on CUDA in "
    "half precision when installed, else sdpa, else eager)",
    "default_compute_precision": "float16 | bfloat16 | float32 for models whose profile names none "
    "(default: float16 on CUDA, float32 on CPU; CPU runs bfloat16 but not float16)",
    "local_cache": "Hugging Face cache directory to find `hf_id` weights in "
    "(default: HF_HUB_CACHE, else HF_HOME/hub)",
    "hf_fallback": "true: download `hf_id` weights missing from the cache from the Hugging Face Hub",
    "cluster_cache": "s3:// gs:// or file:// URL of a shared Hugging Face cache (models--ORG--NAME/"
    "snapshots/REV/...): `hf_id` weights missing locally are copied from it before the Hub is asked; "
    "credentials from each SDK's usual chain (pip install 'sie[cloud]')",
    "disk_cache_enabled": "true: the local cache is the server's to manage: before a copy from the cluster "
    "cache, delete the least recently used cached models (not loaded, not preloaded) to stay under "
    "--disk-pressure-threshold-percent",
    "disk_pressure_threshold_percent": "share of the local cache's disk a copy may fill up to when the "
    "disk cache is enabled",
    "local_cache_bytes": "treat the local cache as a disk of this many bytes, its own files the only "
    "use (default: the real disk's size and use)",
}

_LIST_FIELDS = {"models", "preload", "auth_tokens"}
_BOOL_WORDS = {"yes": "true", "on": "true", "no": "false", "off": "false"}


_BOOL_FIELDS = {f for f in Settings.__struct_fields__ if isinstance(getattr(Settings(), f), bool)}


def env_name(field: str) -> str:
    return "SIE_" + field.upper()


def env_names(field: str) -> list[str]:
    """Every environment name of a setting: ours first, then SIE's where it differs."""
    return [env_name(field), *alias_names(field)]


def load_settings(cli: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """Merge CLI values (None = not given) over `SIE_*` variables over defaults; validate.

    SIE's names for the same settings count as environment too (ours win), and an SIE setting
    for machinery this server lacks stops start-up with the reason (sie.settings_compat).
    """
    if refused := rejected(environ):
        raise ValueError("; ".join(refused))
    raw: dict[str, Any] = {}
    for field in Settings.__struct_fields__:
        value = cli.get(field)
        if value is None:
            value = environ[env_name(field)] if env_name(field) in environ else alias_value(field, environ)
        if value is None:
            continue
        if field in _BOOL_FIELDS and isinstance(value, str):
            value = _BOOL_WORDS.get(value.strip().lower(), value)
        raw[field] = _split_list(value) if field in _LIST_FIELDS else value
    try:
        settings = msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise ValueError(f"invalid setting: {exc}") from None
    _validate(settings)
    return settings


def environment_notices(environ: Mapping[str, str]) -> list[str]:
    """Warnings for start-up: `SIE_*` variables that are not settings (typos, other SIE features)."""
    return notices(environ, (env_name(field) for field in Settings.__struct_fields__))


def _split_list(value: Any) -> list[str] | None:
    if isinstance(value, list):
        return value
    items = [part.strip() for part in str(value).split(",") if part.strip()]
    return items or None


def _validate(settings: Settings) -> None:
    if settings.frontends is not None and settings.frontends < 1:
        raise ValueError("frontends must be at least 1")
    if not 0 <= settings.port < 65536:
        raise ValueError("port must be in 0..65535")
    if settings.max_batch_requests < 1 or settings.max_concurrent_requests < 1:
        raise ValueError("batch and admission limits must be positive")
    if settings.drain_delay_s < 0:
        raise ValueError("drain_delay_s must be >= 0")
    if min(settings.max_image_pixels, settings.max_images_per_item, settings.max_audio_seconds) <= 0:
        raise ValueError("image and audio limits must be positive")
    if settings.media_threads < 1:
        raise ValueError("media_threads must be at least 1")
    if not 0 <= settings.frontend_nice <= 19:
        raise ValueError("frontend_nice must be in 0..19 (a nice increment)")
    if not 0 < settings.memory_pressure_threshold_percent <= 100:
        raise ValueError("memory_pressure_threshold_percent must be in (0, 100]")
    if settings.device_stall_s <= 0 or settings.max_loras_per_model < 1:
        raise ValueError("device_stall_s and max_loras_per_model must be positive")
    if settings.max_batch_tokens is not None and settings.max_batch_tokens < 1:
        raise ValueError("max_batch_tokens must be positive")
    if not 0 < settings.disk_pressure_threshold_percent <= 100:
        raise ValueError("disk_pressure_threshold_percent must be in (0, 100]")
    if settings.local_cache_bytes is not None and settings.local_cache_bytes < 1:
        raise ValueError("local_cache_bytes must be positive")


def available_cores() -> int:
    return len(os.sched_getaffinity(0))
