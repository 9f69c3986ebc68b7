"""An operator's SIE environment file: SIE's names work, what cannot work here stops start-up with a
reason, and a `SIE_*` name nobody reads is pointed out."""

from __future__ import annotations

import pytest

from sie.__main__ import build_parser
from sie.settings import Settings, env_names, environment_notices, load_settings
from sie.settings_compat import ALIASES


@pytest.mark.parametrize(
    ("environ", "field", "expected"),
    [
        ({"SIE_MODEL_FILTER": "a/b, c/d"}, "models", ["a/b", "c/d"]),
        ({"SIE_PRELOAD_MODELS": "a/b"}, "preload", ["a/b"]),
        ({"SIE_MAX_BATCH_COST": "4096"}, "max_batch_tokens", 4096),
        ({"SIE_AUTH_TOKEN": "t1"}, "auth_tokens", ["t1"]),
        ({"SIE_LOG_JSON": "true"}, "log_format", "json"),
        ({"SIE_LOG_JSON": "0"}, "log_format", "text"),
        ({"SIE_TORCH_NUM_THREADS": "3"}, "torch_threads", 3),
        ({"SIE_DEVICE": "cpu"}, "device", "cpu"),
        ({"SIE_MODELS_DIR": "/m"}, "models_dir", "/m"),
        ({"SIE_MAX_BATCH_REQUESTS": "8"}, "max_batch_requests", 8),
        ({"SIE_MAX_BATCH_WAIT_MS": "2.5"}, "max_batch_wait_ms", 2.5),
        ({"SIE_MAX_CONCURRENT_REQUESTS": "9"}, "max_concurrent_requests", 9),
        ({"SIE_INSTRUMENTATION": "yes"}, "instrumentation", True),
        ({"SIE_ATTENTION_BACKEND": "eager"}, "attention_backend", "eager"),
        ({"SIE_DEFAULT_COMPUTE_PRECISION": "bfloat16"}, "default_compute_precision", "bfloat16"),
        ({"SIE_LOCAL_CACHE": "/cache"}, "local_cache", "/cache"),
        ({"SIE_HF_FALLBACK": "on"}, "hf_fallback", True),
        ({"SIE_TRACING_ENABLED": "1"}, "tracing_enabled", True),
        ({"SIE_AUTH_TOKENS": "a,b"}, "auth_tokens", ["a", "b"]),
        ({"SIE_PREPROCESSOR_WORKERS": "4"}, "frontends", 4),
        ({"SIE_IMAGE_WORKERS": "3"}, "media_threads", 3),
        ({"SIE_CLUSTER_CACHE": "s3://bucket/weights"}, "cluster_cache", "s3://bucket/weights"),
        ({"SIE_DISK_CACHE_ENABLED": "true"}, "disk_cache_enabled", True),
        ({"SIE_DISK_PRESSURE_THRESHOLD_PERCENT": "70"}, "disk_pressure_threshold_percent", 70.0),
        ({"SIE_MODELS_DIR": "gs://bucket/models/"}, "models_dir", "gs://bucket/models/"),
    ],
)
def test_sie_names_set_our_settings(environ: dict[str, str], field: str, expected: object) -> None:
    assert getattr(load_settings({}, environ), field) == expected


def test_our_name_beats_sies_and_a_flag_beats_both() -> None:
    environ = {"SIE_MODELS": "ours", "SIE_MODEL_FILTER": "theirs"}
    assert load_settings({}, environ).models == ["ours"]
    assert load_settings({"models": "flag"}, environ).models == ["flag"]
    assert load_settings({}, {"SIE_LOG_FORMAT": "text", "SIE_LOG_JSON": "true"}).log_format == "text"


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("SIE_IPC_SOCKET_PATH", "queue-mode sidecar"),
        ("SIE_NATS_URL", "NATS"),
        ("SIE_GATEWAY_STATIC_QUEUE_POOLS", "gateway"),
        ("SIE_POOL", "gateway"),
        ("SIE_METRICS_ENABLED", "/metrics"),
    ],
)
def test_settings_for_machinery_we_lack_are_refused_with_the_reason(name: str, reason: str) -> None:
    with pytest.raises(ValueError, match=f"{name} is not supported: .*{reason}"):
        load_settings({}, {name: "x"})


def test_unknown_sie_names_are_warned_about_with_a_suggestion() -> None:
    notices = environment_notices(
        {
            "SIE_MODLES": "typo",
            "SIE_TELEMETRY_DISABLED": "1",
            "SIE_PORT": "1",
            "SIE_MODEL_FILTER": "x",
            "SIE_TEST_NO_SKIP": "1",
            "SIE_SHM_TEST_PAUSE_BEFORE_PUBLISH": "/x",
            "PATH": "/bin",
        }
    )
    assert notices == [
        "unknown setting SIE_MODLES is ignored; did you mean SIE_MODELS?",
        "SIE_TELEMETRY_DISABLED has nothing to do here: sie sends no telemetry anywhere",
    ]


def test_help_shows_both_names() -> None:
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    text = " ".join(serve.format_help().split())
    for field, aliases in ALIASES.items():
        assert field in Settings.__struct_fields__
        for alias, _ in aliases:
            assert f"env SIE_{field.upper()} or {alias}" in text
    assert env_names("models") == ["SIE_MODELS", "SIE_MODEL_FILTER"]


def test_bool_words_touch_only_bool_settings() -> None:
    assert load_settings({}, {"SIE_INSTANCE": "yes"}).instance == "yes"
    assert load_settings({}, {"SIE_METRICS_AUTH": "off"}).metrics_auth is False
