"""Intra-op threads per CPU batch: one for a light batch, the free cores for a heavy one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.cpu_load import OthersLoad, read_busy_s
from sie.gpu_proc.runner import Runner
from sie.gpu_proc.threads import HEAVY, PARALLEL_MIN_FLOPS, ThreadPolicy, linear_weights

from .tiny import as_batch, model_config, random_items


@pytest.fixture
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture
def adapter(tiny_models: dict[str, Path]) -> Adapter:
    return load_adapter(model_config("bert"), tiny_models["bert"], "cpu")


def test_counts_the_linear_weights_the_adapter_holds(adapter: Adapter) -> None:
    seen: dict[int, torch.nn.Linear] = {}
    stack = list(vars(adapter).values())
    while stack:  # every object reachable from the adapter, however deep
        value = stack.pop()
        if isinstance(value, torch.nn.Module):
            seen.update({id(m): m for m in value.modules() if isinstance(m, torch.nn.Linear)})
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            stack += list(vars(value).values())
    expected = sum(m.weight.numel() for m in seen.values())
    assert expected > 0 and linear_weights(adapter) == expected
    onnx_like = type("Session", (), {"path": "model.onnx"})()
    assert linear_weights(onnx_like) == HEAVY  # no torch modules: an opaque runtime


def test_a_light_batch_runs_on_one_thread_and_a_heavy_one_on_every_core(
    adapter: Adapter, restore_threads: None
) -> None:
    policy = ThreadPolicy(most=2)
    light = int(PARALLEL_MIN_FLOPS // (2 * linear_weights(adapter))) - 1
    assert policy.choose(adapter, light, is_media=False) == 1 and torch.get_num_threads() == 1
    assert policy.choose(adapter, light + 2, is_media=False) == 2 and torch.get_num_threads() == 2


def test_forwards_running_at_once_share_the_cores(adapter: Adapter, restore_threads: None) -> None:
    policy = ThreadPolicy(most=4)
    heavy = int(PARALLEL_MIN_FLOPS // (2 * linear_weights(adapter))) + 1
    assert policy.choose(adapter, heavy, is_media=False, sharing=1) == 4
    assert policy.choose(adapter, heavy, is_media=False, sharing=2) == 2 and torch.get_num_threads() == 2
    assert policy.choose(adapter, heavy, is_media=False, sharing=8) == 1
    assert policy.choose(adapter, 1, is_media=False, sharing=2) == 1


def test_media_cost_what_the_adapter_says_or_count_as_heavy(adapter: Adapter, restore_threads: None) -> None:
    policy = ThreadPolicy(most=2)
    assert policy.choose(adapter, 1, is_media=True) == 2  # no media_flops_per_item: heavy
    images = type("Images", (), {"media_flops_per_item": PARALLEL_MIN_FLOPS / 4})()
    assert policy.choose(images, 3, is_media=True) == 1  # type: ignore[arg-type]
    assert policy.choose(images, 4, is_media=True) == 2  # type: ignore[arg-type]


def test_an_operators_thread_count_is_never_changed(adapter: Adapter, restore_threads: None) -> None:
    policy = ThreadPolicy(most=2, fixed=2)
    torch.set_num_threads(1)  # as the device's loop thread keeps it: each batch's thread is set
    assert policy.choose(adapter, 1, is_media=False) == 2 and torch.get_num_threads() == 2
    assert policy.choose(adapter, 10**9, is_media=False) == 2 and torch.get_num_threads() == 2


def test_the_runner_applies_the_policy(adapter: Adapter, restore_threads: None) -> None:
    runner = Runner(torch.device("cpu"), ThreadPolicy(most=2))
    torch.set_num_threads(2)
    out = runner.run_dense(adapter, as_batch(random_items(3, seed=1)))
    assert out.shape[0] == 3 and torch.get_num_threads() == 1  # a tiny model: always light


def test_each_thread_that_runs_a_batch_gets_the_count_chosen_for_it(
    adapter: Adapter, restore_threads: None
) -> None:
    # OpenMP keeps the count per calling thread: a light batch runs on the device loop's thread,
    # a heavy one on the inference thread, and one thread's setting must not stand for the other's.
    policy = ThreadPolicy(most=2)
    seen: list[int] = []
    worker = threading.Thread(
        target=lambda: seen.append(policy.choose(adapter, 1, is_media=False) and torch.get_num_threads())
    )
    worker.start()
    worker.join()
    assert seen == [1]
    assert policy.choose(adapter, 1, is_media=False) == 1 and torch.get_num_threads() == 1


class FakeLoad:
    def __init__(self, busy: float | None) -> None:
        self.busy = busy

    def busy_cores(self) -> float | None:
        return self.busy


@pytest.mark.parametrize(("busy", "threads"), [(None, 2), (0.0, 2), (0.4, 2), (0.6, 1), (1.7, 1)])
def test_a_heavy_batch_gets_the_cores_other_processes_leave_free(
    adapter: Adapter, restore_threads: None, busy: float | None, threads: int
) -> None:
    policy = ThreadPolicy(most=2, others=FakeLoad(busy))  # type: ignore[arg-type]
    heavy = int(PARALLEL_MIN_FLOPS // (2 * linear_weights(adapter))) + 1
    assert policy.choose(adapter, heavy, is_media=False) == threads == torch.get_num_threads()
    assert policy.choose(adapter, 1, is_media=False) == 1  # a light batch never asks


def test_others_load_leaves_this_process_out_and_reads_once_a_window() -> None:
    clock, busy_s, own_s, reads = [0.0], [100.0], [5.0], [0]

    def read_busy(cpus: frozenset[int]) -> float:
        reads[0] += 1
        return busy_s[0]

    load = OthersLoad(frozenset({0, 1}), 0.2, read_busy, lambda: own_s[0], lambda: clock[0])
    assert load.busy_cores() is None  # no window has passed yet
    clock[0], busy_s[0], own_s[0] = 0.1, 100.3, 5.1
    assert load.busy_cores() is None and reads[0] == 1  # inside the window: not even read
    clock[0], busy_s[0], own_s[0] = 0.5, 101.0, 5.4  # 1.0 s busy on the box, 0.4 s of it ours
    assert load.busy_cores() == pytest.approx(1.2)  # 0.6 s of others' work in 0.5 s
    clock[0] = 0.6
    assert load.busy_cores() == pytest.approx(1.2) and reads[0] == 2


def test_others_load_sees_a_busy_process_on_this_box() -> None:
    if read_busy_s(frozenset(os.sched_getaffinity(0))) is None:
        pytest.skip("no /proc/stat")
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started and spinning
        load = OthersLoad(window_s=0.5)
        time.sleep(0.6)
        busy = load.busy_cores()
    finally:
        burner.kill()
        burner.wait()
    assert busy is not None and busy >= 0.6  # the burner takes most of a core, and others add


def test_a_thread_keeps_its_count_when_torch_first_sets_up_its_threads(
    adapter: Adapter, restore_threads: None
) -> None:
    # torch gives a thread the count last set by any thread the first time it does parallel work.
    # Here the inference thread chose two threads, the loop thread then ran a light batch (one),
    # and only then did the inference thread's forward start: it must still run on two.
    policy = ThreadPolicy(most=2)
    heavy = int(PARALLEL_MIN_FLOPS // (2 * linear_weights(adapter))) + 1
    chosen, light_done = threading.Event(), threading.Event()
    seen: list[int] = []

    def inference_thread() -> None:
        policy.choose(adapter, heavy, is_media=False)
        chosen.set()
        light_done.wait(10)
        torch.get_num_threads()  # what a forward's first parallel operation does first
        seen.append(policy.choose(adapter, heavy, is_media=False) and torch.get_num_threads())

    worker = threading.Thread(target=inference_thread)
    worker.start()
    assert chosen.wait(10)
    assert policy.choose(adapter, 1, is_media=False) == 1
    light_done.set()
    worker.join()
    assert seen == [2]


def test_busy_time_matches_proc_stat() -> None:
    """The busy seconds of a CPU set equal /proc/stat's user+nice+system+irq+softirq for those CPUs."""
    cpus = frozenset(os.sched_getaffinity(0))

    def from_proc() -> float:
        busy = 0
        for line in Path("/proc/stat").read_text().splitlines()[1:]:
            if not line.startswith("cpu"):
                break
            name, *fields = line.split()
            if int(name[3:]) in cpus:
                user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
                busy += user + nice + system + irq + softirq
        return busy / os.sysconf("SC_CLK_TCK")

    before = from_proc()
    got = read_busy_s(cpus)
    after = from_proc()
    assert got is not None and before - 0.02 <= got <= after + 0.02, (before, got, after)
    assert read_busy_s(frozenset({10**6})) == 0.0  # a CPU this box does not have counts nothing
