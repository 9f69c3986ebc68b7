"""`GET /metrics`: the whole server in one scrape, whichever frontend answers it.

Every process counts into the shared statistics block (`sie.metrics`) and publishes its state in
the control block; this collector reads both at scrape time, sums the frontends' rows, and adds
what only a scrape needs (memory of the devices and of every process). Only series that have
counted something are written, so an idle catalog of many models stays a short page.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from sie.frontend.hostinfo import Nvml, host_memory, process_usage
from sie.metrics.block import StatsBlock
from sie.metrics.labels import (
    BATCH_SIZE_BUCKETS,
    BATCH_TOKENS_BUCKETS,
    CODES,
    DIRECTIONS,
    LATENCY_BUCKETS_S,
    ROUTES,
    STAGES,
    status_label,
)
from sie.shm.control import ControlBlock, DeviceState, ModelState
from sie.version import SIE_PROTOCOL_VERSION, __version__

_STATES = {s: s.name.lower() for s in ModelState}


@dataclass(frozen=True, slots=True)
class Sources:
    stats: StatsBlock
    control: ControlBlock
    # Each slot's model id (index = slot), None for a retired slot: a model changed or removed while
    # running; its counters leave the page rather than appear twice under one name. Updated in place.
    models: list[str | None]
    devices: list[str]  # "cpu", "cuda:0" per device index


class ServerCollector(Collector):
    def __init__(self, sources: Sources, nvml: Nvml | None = None) -> None:
        self.sources = sources
        self.nvml = nvml or Nvml()

    @property
    def model_labels(self) -> list[str | None]:
        """A label per statistics slot: spare slots never used are None, the last is "" (no model)."""
        names = self.sources.models
        return [*names, *[None] * (self.sources.stats.n_models - len(names)), ""]

    def collect(self) -> Iterator[Metric]:
        yield from self._info()
        yield from self._requests()
        yield from self._stage_histograms()
        yield from self._batches()
        yield from self._models()
        yield from self._devices()
        yield from self._processes()
        yield from self._rings()

    # -- frontends -------------------------------------------------------------------------------
    def _info(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "sie_build_info",
            "This server's version and the SIE protocol it speaks",
            labels=["version", "protocol_version"],
        )
        info.add_metric([__version__, SIE_PROTOCOL_VERSION], 1)
        yield info

    def _requests(self) -> Iterator[Metric]:
        v, names = self.sources.stats.v, self.model_labels
        requests = CounterMetricFamily(
            "sie_requests", "HTTP requests answered", labels=["route", "model", "status"]
        )
        for r, m, s in _named(_nonzero(v["requests"].sum(axis=0)), names, 1):
            requests.add_metric([ROUTES[r], names[m], status_label(s)], _at(v["requests"], (r, m, s)))
        yield requests
        errors = v["errors"].sum(axis=0)
        by_code = CounterMetricFamily("sie_errors", "Error responses by error code", labels=["model", "code"])
        for m, c in _named(_nonzero(errors), names, 0):
            by_code.add_metric([names[m], CODES[c]], float(errors[m, c]))
        yield by_code
        queue_full = CounterMetricFamily(
            "sie_queue_full", "Requests refused with 503 QUEUE_FULL", labels=["model"]
        )
        for (m,) in _named(_nonzero(errors[:, CODES.index("QUEUE_FULL")]), names, 0):
            queue_full.add_metric([names[m]], float(errors[m, CODES.index("QUEUE_FULL")]))
        yield queue_full
        in_flight = GaugeMetricFamily("sie_requests_in_flight", "API requests being served now")
        in_flight.add_metric([], float(v["in_flight"].sum()))
        yield in_flight
        rebalances = CounterMetricFamily(
            "sie_connection_rebalances",
            "Keep-alive connections closed to move their client to a less busy frontend",
        )
        rebalances.add_metric([], float(v["rebalances"].sum()))
        yield rebalances
        for key, name, doc in (
            ("items", "sie_items", "Items (texts, pairs) sent to devices"),
            ("tokens", "sie_tokens", "Tokens sent to devices"),
            ("disconnects", "sie_client_disconnects", "Requests whose client left before the answer"),
        ):
            yield _per_model_counter(name, doc, v[key].sum(axis=0), names)

    def _stage_histograms(self) -> Iterator[Metric]:
        v, names = self.sources.stats.v, self.model_labels
        buckets, sums = v["stage_buckets"].sum(axis=0), v["stage_sum_s"].sum(axis=0)
        family = HistogramMetricFamily(
            "sie_request_stage_seconds", "Time per request in each stage", labels=["stage", "model"]
        )
        for s, m in _named(_nonzero(buckets.sum(axis=2)), names, 1):
            family.add_metric(
                [STAGES[s], names[m]], _cumulative(LATENCY_BUCKETS_S, buckets[s, m]), float(sums[s, m])
            )
        yield family

    # -- devices ---------------------------------------------------------------------------------
    def _batches(self) -> Iterator[Metric]:
        v, names = self.sources.stats.v, self.model_labels
        for key, name, doc, bounds, total in (
            (
                "batch_size_buckets",
                "sie_batch_size",
                "Items per forward batch",
                BATCH_SIZE_BUCKETS,
                "batch_items",
            ),
            (
                "batch_tokens_buckets",
                "sie_batch_tokens",
                "Tokens per forward batch",
                BATCH_TOKENS_BUCKETS,
                "batch_tokens",
            ),
        ):
            family = HistogramMetricFamily(name, doc, labels=["device", "model"])
            for d, m in _named(_nonzero(v[key].sum(axis=2)), names, 1):
                family.add_metric(
                    [str(d), names[m]], _cumulative(bounds, v[key][d, m]), float(v[total][d, m])
                )
            yield family
        for key, name, doc in (
            ("padded_tokens", "sie_batch_padded_tokens", "Token positions computed, padding included"),
            ("forward_s", "sie_forward_seconds", "Time in forward passes"),
            ("failed_batches", "sie_failed_batches", "Forward batches that failed"),
            ("cancelled_items", "sie_cancelled_items", "Queued items dropped because their client left"),
            ("loads", "sie_model_loads", "Model loads that succeeded"),
            ("load_failures", "sie_model_load_failures", "Model loads that failed"),
            ("unloads", "sie_model_unloads", "Models unloaded"),
            ("load_s", "sie_model_load_seconds", "Time spent loading models"),
        ):
            family = CounterMetricFamily(name, doc, labels=["device", "model"])
            for d, m in _named(_nonzero(v[key]), names, 1):
                family.add_metric([str(d), names[m]], float(v[key][d, m]))
            yield family

    def _models(self) -> Iterator[Metric]:
        control, names = self.sources.control, self.model_labels
        n_models = len(self.sources.models)
        state = GaugeMetricFamily(
            "sie_model_state",
            "1 for the state each model is in, per device",
            labels=["device", "model", "state"],
        )
        pending = GaugeMetricFamily(
            "sie_pending_items", "Items waiting in a device's queue", labels=["device", "model"]
        )
        memory = GaugeMetricFamily(
            "sie_model_memory_bytes", "Memory a loaded model holds", labels=["device", "model"]
        )
        for d in range(control.n_devices):
            states = control.models["state"][d, :n_models].tolist()
            depths = control.models["queue_depth"][d, :n_models].tolist()
            sizes = control.models["memory_bytes"][d, :n_models].tolist()
            for m in range(n_models):
                if names[m] is None:
                    continue
                for value, label in _STATES.items():
                    state.add_metric([str(d), names[m], label], 1.0 if states[m] == value else 0.0)
                pending.add_metric([str(d), names[m]], depths[m])
                if sizes[m] and states[m] == ModelState.LOADED:
                    memory.add_metric([str(d), names[m]], sizes[m])
        yield from (state, pending, memory)

    def _devices(self) -> Iterator[Metric]:
        control, v = self.sources.control, self.sources.stats.v
        up = GaugeMetricFamily("sie_device_up", "1 when the device process serves", labels=["device", "name"])
        used = GaugeMetricFamily(
            "sie_device_memory_used_bytes", "Device memory in use", labels=["device", "name"]
        )
        total = GaugeMetricFamily("sie_device_memory_total_bytes", "Device memory", labels=["device", "name"])
        restarts = CounterMetricFamily(
            "sie_device_restarts", "Device process restarts", labels=["device", "name"]
        )
        for d, name in enumerate(self.sources.devices):
            labels = [str(d), name]
            up.add_metric(labels, 1.0 if control.device_state(d) == DeviceState.UP else 0.0)
            restarts.add_metric(labels, float(v["device_restarts"][d]))
            has_pci, domain, bus, device = v["pci"][d].tolist()
            memory = self.nvml.gpu_memory(domain, bus, device) if has_pci else None
            if memory is None and name.startswith("cpu"):  # "cpu", or "cpu:1" with several
                memory = host_memory()
            if memory is not None:
                used.add_metric(labels, memory.used_bytes)
                total.add_metric(labels, memory.total_bytes)
        frontend_restarts = CounterMetricFamily(
            "sie_frontend_restarts", "Frontend process restarts", labels=["frontend"]
        )
        for f, count in enumerate(v["frontend_restarts"].tolist()):
            frontend_restarts.add_metric([str(f)], count)
        yield from (up, used, total, restarts, frontend_restarts)

    def _processes(self) -> Iterator[Metric]:
        v = self.sources.stats.v
        rss = GaugeMetricFamily(
            "sie_process_resident_memory_bytes",
            "Resident memory of each server process",
            labels=["role", "index"],
        )
        anonymous = GaugeMetricFamily(
            "sie_process_anonymous_memory_bytes",
            "Private (anonymous) resident memory of each server process: RSS without shared rings",
            labels=["role", "index"],
        )
        cpu = CounterMetricFamily(
            "sie_process_cpu_seconds", "CPU time of each server process", labels=["role", "index"]
        )
        pids = [("supervisor", 0, int(v["supervisor_pid"][0]))]
        pids += [("device", i, p) for i, p in enumerate(v["device_pids"].tolist())]
        pids += [("frontend", i, p) for i, p in enumerate(v["frontend_pids"].tolist())]
        for role, index, pid in pids:
            usage = process_usage(pid)
            if usage is not None:
                rss.add_metric([role, str(index)], usage.rss_bytes)
                anonymous.add_metric([role, str(index)], usage.anonymous_bytes)
                cpu.add_metric([role, str(index)], usage.cpu_s)
        yield from (rss, anonymous, cpu)

    def _rings(self) -> Iterator[Metric]:
        v = self.sources.stats.v
        used = GaugeMetricFamily(
            "sie_ring_used_bytes",
            "Bytes held in a shared-memory ring",
            labels=["device", "frontend", "direction"],
        )
        pending = GaugeMetricFamily(
            "sie_ring_pending_messages",
            "Messages waiting in a ring",
            labels=["device", "frontend", "direction"],
        )
        capacity = GaugeMetricFamily(
            "sie_ring_capacity_bytes", "Arena bytes of each ring", labels=["direction"]
        )
        overflow = GaugeMetricFamily(
            "sie_result_overflow_messages",
            "Results waiting for room in a full response ring",
            labels=["device", "frontend"],
        )
        for d in range(v["ring_used_bytes"].shape[0]):
            for f in range(v["ring_used_bytes"].shape[1]):
                for k, direction in enumerate(DIRECTIONS):
                    used.add_metric([str(d), str(f), direction], float(v["ring_used_bytes"][d, f, k]))
                    pending.add_metric([str(d), str(f), direction], float(v["ring_pending"][d, f, k]))
                overflow.add_metric([str(d), str(f)], float(v["overflow"][d, f]))
        for k, direction in enumerate(DIRECTIONS):
            capacity.add_metric([direction], float(v["ring_capacity_bytes"][k]))
        yield from (used, pending, capacity, overflow)


def _nonzero(array: np.ndarray) -> list[tuple[int, ...]]:
    return [tuple(int(i) for i in index) for index in zip(*np.nonzero(array), strict=True)]


def _at(per_frontend: np.ndarray, index: tuple[int, ...]) -> float:
    return float(per_frontend[(slice(None), *index)].sum())


def _cumulative(bounds: tuple[float, ...], counts: np.ndarray) -> list[tuple[str, float]]:
    running = np.cumsum(counts).tolist()
    return [
        *((repr(float(b)) if isinstance(b, float) else str(b), running[i]) for i, b in enumerate(bounds)),
        ("+Inf", running[-1]),
    ]


def _named(cells: list[tuple[int, ...]], names: list[str | None], axis: int) -> list[tuple[int, ...]]:
    """The cells whose model (at position `axis`) has a label: retired slots leave the page."""
    return [cell for cell in cells if names[cell[axis]] is not None]


def _per_model_counter(
    name: str, doc: str, per_model: np.ndarray, names: list[str | None]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["model"])
    for (m,) in _named(_nonzero(per_model), names, 0):
        family.add_metric([names[m]], float(per_model[m]))
    return family
