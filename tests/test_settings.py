from __future__ import annotations

import pytest

from sie.settings import Settings, env_name, load_settings


def test_defaults() -> None:
    settings = load_settings({}, {})
    assert settings == Settings()
    assert (settings.host, settings.port, settings.frontends, settings.device) == (
        "127.0.0.1",
        8080,
        None,  # chosen at start from the devices and cores
        "auto",
    )


def test_cli_beats_environment_beats_default() -> None:
    environ = {"SIE_PORT": "9000", "SIE_FRONTENDS": "3", "SIE_MAX_BATCH_WAIT_MS": "2.5"}
    settings = load_settings({"port": "9100", "frontends": None}, environ)
    assert settings.port == 9100
    assert settings.frontends == 3
    assert settings.max_batch_wait_ms == 2.5


def test_lists_split_on_commas() -> None:
    settings = load_settings({"models": "a/b, c/d"}, {"SIE_PRELOAD": "a/b"})
    assert settings.models == ["a/b", "c/d"]
    assert settings.preload == ["a/b"]


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        ({"port": "eighty"}, "port"),
        ({"frontends": "0"}, "frontends"),
        ({"log_format": "xml"}, "log_format"),
        ({"drain_delay_s": "-1"}, "drain_delay_s"),
        ({"media_threads": "0"}, "media_threads"),
        ({"frontend_nice": "-1"}, "frontend_nice"),
        ({"frontend_nice": "20"}, "frontend_nice"),
        ({"disk_pressure_threshold_percent": "0"}, "disk_pressure_threshold_percent"),
        ({"local_cache_bytes": "0"}, "local_cache_bytes"),
    ],
)
def test_invalid_values_are_rejected(cli: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_settings(cli, {})


def test_children_get_settings_back_unchanged() -> None:
    settings = load_settings({"models": "x", "port": "1"}, {})
    assert Settings.decode(settings.encode()) == settings


def test_every_field_has_an_env_twin() -> None:
    for field in Settings.__struct_fields__:
        default = getattr(Settings(), field)
        value = "7" if isinstance(default, int) and not isinstance(default, bool) else None
        if value is None:
            continue
        assert getattr(load_settings({}, {env_name(field): value}), field) == 7


def test_drain_delay_defaults_to_none_and_reads_its_env_twin() -> None:
    assert load_settings({}, {}).drain_delay_s == 0.0
    assert load_settings({}, {"SIE_DRAIN_DELAY_S": "3"}).drain_delay_s == 3.0


def test_sie_names_of_the_lifecycle_settings_keep_working() -> None:
    # An operator's existing SIE environment file must configure the same knobs.
    environ = {
        "SIE_MEMORY_PRESSURE_THRESHOLD_PERCENT": "70",
        "SIE_IDLE_EVICT_S": "600",
        "SIE_MAX_LORAS_PER_MODEL": "4",
        "SIE_DEVICE_MEMORY_BYTES": "8000000000",
    }
    settings = load_settings({}, environ)
    assert settings.memory_pressure_threshold_percent == 70.0
    assert settings.idle_evict_s == 600.0 and settings.max_loras_per_model == 4
    assert settings.device_memory_bytes == 8_000_000_000
    defaults = Settings()
    assert (defaults.idle_evict_s, defaults.load_failure_cooldown_s, defaults.device_stall_s) == (
        None,
        60.0,
        30.0,
    )
    with pytest.raises(ValueError, match="memory_pressure_threshold_percent"):
        load_settings({"memory_pressure_threshold_percent": "0"}, {})
