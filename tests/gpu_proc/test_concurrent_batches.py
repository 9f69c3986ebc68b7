"""Two batches at once on a CPU device: only through adapters that allow it, each on its share of cores."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from sie.gpu_proc import inference
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.batcher import Batch
from sie.gpu_proc.inference import Finished, InferenceThread
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.registry import Registry
from sie.gpu_proc.runner import Runner
from sie.gpu_proc.threads import concurrent_batches, no_openmp_team
from sie.shm.control import ModelState
from sie.shm.layout import ResultKind, Status

from .lifecycle_fakes import FakeProbe, catalog_of, fake_loader, new_control, wait_state
from .test_dense_adapter import assert_close, reference
from .test_recovery import batch_of
from .tiny import as_batch, model_config, random_items

Forward = Callable[[Any, Batch, int], dict[ResultKind, Output]]


class Overlap:
    """Counts the forwards running at once, and records each one's `sharing`."""

    def __init__(self, hold_s: float = 0.05) -> None:
        self.hold_s = hold_s
        self.active = 0
        self.most = 0
        self.sharing: list[int] = []
        self._lock = threading.Lock()

    def forward(self, adapter: Any, batch: Batch, sharing: int = 1) -> dict[ResultKind, Output]:
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
            self.sharing.append(sharing)
        time.sleep(self.hold_s)
        with self._lock:
            self.active -= 1
        rows = np.zeros((len(batch.items), 2), np.float32)
        return {ResultKind.DENSE: Output(ResultKind.DENSE, rows)}


def started(
    tmp_path: Path, forward: Forward, workers: int, concurrent: bool, loader: Any = None
) -> Iterator[InferenceThread]:
    control = new_control(1)
    probe = FakeProbe(capacity=1 << 30)
    registry = Registry(catalog_of(tmp_path, ["m/a"]), control, 0, "cpu", loader=loader or fake_loader(probe))
    registry.request_load(0)
    wait_state(control, 0, ModelState.LOADED)
    adapter = registry.get(0)
    adapter.concurrent_forwards = concurrent  # type: ignore[union-attr]
    runner: Any = SimpleNamespace(run=forward, is_light=lambda a, b: False)
    thread = InferenceThread(runner, registry, wake=lambda: None, workers=workers)
    try:
        yield thread
    finally:
        thread.stop()
        control.close()
        control.unlink()


def finish(thread: InferenceThread, batches: list[Batch], timeout_s: float = 10.0) -> list[Finished]:
    for batch in batches:
        thread.submit(batch)
    done: list[Finished] = []
    deadline = time.monotonic() + timeout_s
    while len(done) < len(batches):
        assert time.monotonic() < deadline, "batches did not finish"
        done += thread.take_finished()
        time.sleep(0.002)
    return done


def test_an_adapter_that_allows_it_runs_two_batches_at_once_each_told_so(tmp_path: Path) -> None:
    overlap = Overlap()
    for thread in started(tmp_path, overlap.forward, workers=2, concurrent=True):
        assert thread.depth == 2
        done = finish(thread, [batch_of([3]), batch_of([4]), batch_of([5]), batch_of([6])])
    assert [d.status for d in done] == [Status.OK] * 4
    assert overlap.most == 2 and 2 in overlap.sharing


def test_an_adapter_with_state_runs_one_batch_at_a_time(tmp_path: Path) -> None:
    overlap = Overlap()
    for thread in started(tmp_path, overlap.forward, workers=2, concurrent=False):
        done = finish(thread, [batch_of([3]), batch_of([4]), batch_of([5])])
    assert [d.status for d in done] == [Status.OK] * 3
    assert overlap.most == 1 and overlap.sharing == [1, 1, 1]
    # The wait for the model's turn is not inference time: each forward starts after the last ends.
    spans = sorted((d.started_ns, d.finished_ns) for d in done)
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))


def test_while_an_adapter_with_state_runs_the_loop_hands_over_nothing_more(tmp_path: Path) -> None:
    # A second batch of its model would wait sealed, when it could still grow in the batcher.
    overlap = Overlap(hold_s=0.1)
    for thread in started(tmp_path, overlap.forward, workers=2, concurrent=False):
        assert thread.depth == 2
        thread.submit(batch_of([3]))
        assert thread.depth == 1
        deadline = time.monotonic() + 5
        while not thread.take_finished():
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert thread.depth == 2


def test_one_worker_never_overlaps(tmp_path: Path) -> None:
    overlap = Overlap()
    for thread in started(tmp_path, overlap.forward, workers=1, concurrent=True):
        assert thread.depth == 1
        finish(thread, [batch_of([3]), batch_of([4]), batch_of([5])])
    assert overlap.most == 1


def test_a_failing_batch_does_not_stop_the_other_worker(tmp_path: Path) -> None:
    overlap = Overlap()

    def forward(adapter: Any, batch: Batch, sharing: int = 1) -> dict[ResultKind, Output]:
        if len(batch.items[0].input_ids) == 4:
            raise ValueError("broken item")
        return overlap.forward(adapter, batch, sharing)

    for thread in started(tmp_path, forward, workers=2, concurrent=True):
        done = finish(thread, [batch_of([3]), batch_of([4]), batch_of([5])])
        statuses = sorted((len(d.batch.items[0].input_ids), d.status) for d in done)
        assert statuses == [(3, Status.OK), (4, Status.INFERENCE_ERROR), (5, Status.OK)]
        assert [d.status for d in finish(thread, [batch_of([6])])] == [Status.OK]


@pytest.mark.usefixtures("deterministic_torch")
def test_concurrent_batches_through_a_real_encoder_match_transformers(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    folder = tiny_models["bert"]

    def loader(config: Any, weights: Path, device: str) -> Any:
        return load_adapter(model_config("bert"), folder, "cpu")

    runner = Runner(torch.device("cpu"))
    groups = [random_items(6, seed=seed) for seed in range(8)]
    for thread in started(tmp_path, runner.run, workers=2, concurrent=True, loader=loader):
        done = finish(thread, [as_batch(items) for items in groups])
    assert [d.status for d in done] == [Status.OK] * len(groups)
    for finished in done:
        items = [item.input_ids for item in finished.batch.items]
        assert finished.outputs is not None
        assert_close(finished.outputs[ResultKind.DENSE].values, reference(folder, items, "mean"))


@pytest.mark.parametrize(
    ("cores", "fixed", "batches"),
    [(1, None, 1), (2, None, 2), (16, None, 2), (2, 2, 1), (4, 2, 2), (3, 2, 1)],
)
def test_a_cpu_device_runs_two_batches_when_its_cores_hold_two_forwards(
    cores: int, fixed: int | None, batches: int
) -> None:
    assert concurrent_batches(cores, fixed) == batches


def test_a_lone_batch_always_runs_on_the_first_worker(tmp_path: Path) -> None:
    # Its OpenMP team lives on that thread: a lone batch elsewhere would build a second one.
    ran_on: list[int] = []
    overlap = Overlap(hold_s=0.005)

    def forward(adapter: Any, batch: Batch, sharing: int = 1) -> dict[ResultKind, Output]:
        ran_on.append(threading.get_ident())
        return overlap.forward(adapter, batch, sharing)

    for thread in started(tmp_path, forward, workers=2, concurrent=True):
        for length in range(3, 15):
            assert [d.status for d in finish(thread, [batch_of([length])])] == [Status.OK]
    assert len(ran_on) == 12 and len(set(ran_on)) == 1


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc")
def test_an_idle_second_worker_ends_its_thread_and_its_openmp_team(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inference, "HELPER_IDLE_S", 0.1)
    overlap = Overlap(hold_s=0.2)

    def forward(adapter: Any, batch: Batch, sharing: int = 1) -> dict[ResultKind, Output]:
        torch.set_num_threads(2)  # a team of two on whichever worker runs this
        (torch.ones(1 << 20) * 2).sum()  # large enough for torch to run it in parallel
        return overlap.forward(adapter, batch, sharing)

    before = torch.get_num_threads()
    try:
        for thread in started(tmp_path, forward, workers=2, concurrent=True):
            finish(thread, [batch_of([3])])  # the first worker and its team
            lone = os_threads()
            assert thread.live_threads() == 1
            done = finish(thread, [batch_of([4]), batch_of([5])])
            assert [d.status for d in done] == [Status.OK] * 2 and overlap.most == 2
            assert os_threads() == lone + 2  # the second worker and the one thread of its team
            wait_for(lambda t=thread, n=lone: t.live_threads() == 1 and os_threads() == n)
            # A fresh second worker takes the next pair's second batch.
            done = finish(thread, [batch_of([6]), batch_of([7])])
            assert [d.status for d in done] == [Status.OK] * 2 and thread.live_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_loaders_thread_runs_the_setup_it_is_given(tmp_path: Path) -> None:
    seen: list[int] = []
    probe = FakeProbe(capacity=1 << 30)
    load = fake_loader(probe)

    def loader(*args: Any) -> Any:
        seen.append(torch.get_num_threads())
        return load(*args)

    control = new_control(1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        catalog = catalog_of(tmp_path, ["m/a"])
        registry = Registry(catalog, control, 0, "cpu", loader=loader, loader_thread_setup=no_openmp_team)
        registry.request_load(0)
        wait_state(control, 0, ModelState.LOADED)
        assert seen == [1] and torch.get_num_threads() == 2  # the loader's count, not this thread's
    finally:
        torch.set_num_threads(before)
        control.close()
        control.unlink()
