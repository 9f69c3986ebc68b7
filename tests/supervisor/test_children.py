from __future__ import annotations

import pytest

from sie.supervisor import children
from sie.supervisor.children import MAX_RAPID_RESTARTS, Child, frontend_count, resolve_devices


def test_resolve_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(children, "visible_gpu_count", lambda: 0)
    assert resolve_devices("auto") == ["cpu"]
    assert resolve_devices("cpu") == ["cpu"]
    assert resolve_devices("cpu,cpu") == ["cpu", "cpu"]
    with pytest.raises(ValueError, match="no device"):
        resolve_devices("cuda")
    monkeypatch.setattr(children, "visible_gpu_count", lambda: 2)
    assert resolve_devices("auto") == ["cuda:0", "cuda:1"]
    assert resolve_devices("cuda:1") == ["cuda:1"]
    assert resolve_devices("cuda:0,1") == ["cuda:0", "cuda:1"]
    with pytest.raises(ValueError, match="unknown device"):
        resolve_devices("tpu")


def test_restart_backoff_grows_then_gives_up() -> None:
    child = Child("device", 0, started_s=100.0)
    delays = []
    for _ in range(MAX_RAPID_RESTARTS):
        assert child.schedule_restart(now=101.0)
        assert child.restart_at_s is not None
        delays.append(child.restart_at_s - 101.0)
    assert delays == sorted(delays) and delays[0] < delays[-1]
    assert not child.schedule_restart(now=101.0)


def test_a_child_that_ran_long_enough_starts_over() -> None:
    child = Child("frontend", 1, started_s=0.0, rapid_restarts=5)
    assert child.schedule_restart(now=1000.0)
    assert child.rapid_restarts == 0


def test_duplicate_device_names_get_their_index_for_display() -> None:
    from sie.supervisor.run import device_labels

    assert device_labels(["cpu"]) == ["cpu"]
    assert device_labels(["cpu", "cpu"]) == ["cpu:0", "cpu:1"]
    assert device_labels(["cuda:0", "cuda:1"]) == ["cuda:0", "cuda:1"]


def test_frontends_follow_the_devices_and_cores_unless_asked() -> None:
    assert frontend_count(None, ["cpu"], 64) == 2  # the forward shares the cores with them
    assert frontend_count(None, ["cuda:0"], 16) == 14  # two cores left to the device process
    assert frontend_count(None, ["cuda:0", "cuda:1"], 16) == 12
    assert frontend_count(None, ["cuda:0"] * 8, 128) == 32  # at most 32
    assert frontend_count(None, ["cuda:0"], 2) == 2  # at least 2
    assert frontend_count(None, ["cuda:0", "cuda:1"], 4) == 2
    assert frontend_count(3, ["cuda:0"], 16) == 3
