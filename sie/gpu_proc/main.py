"""Device process entry point: attach to the supervisor's shared memory, load models, run the loop."""

from __future__ import annotations

import logging
import signal

import torch
from transformers.utils import logging as transformers_logging

from sie.catalog import Catalog
from sie.gpu_proc.adapters.base import load_adapter
from sie.gpu_proc.adapters.cuda_graphs import Graphs
from sie.gpu_proc.attention import configure_attention
from sie.gpu_proc.batcher import Batcher, token_budget
from sie.gpu_proc.cpu_linear import onednn_wanted, with_onednn_linears
from sie.gpu_proc.cpu_load import OthersLoad
from sie.gpu_proc.device_stats import attach_device_stats
from sie.gpu_proc.eviction import MemoryManager
from sie.gpu_proc.inference import InferenceThread
from sie.gpu_proc.loop import DeviceLoop
from sie.gpu_proc.memory import probe_for
from sie.gpu_proc.registry import Registry
from sie.gpu_proc.runner import Runner
from sie.gpu_proc.threads import ThreadPolicy, concurrent_batches, no_openmp_team
from sie.gpu_proc.weights import cluster_weights
from sie.logs import configure_logging
from sie.settings import Settings, available_cores
from sie.shared_catalog import CatalogFeed
from sie.shm.control import ControlBlock, DeviceState
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.names import Namespace
from sie.specs import DeviceSpec

log = logging.getLogger(__name__)


def main(settings: Settings, spec: DeviceSpec) -> int:
    configure_logging(settings.log_level, settings.log_format, f"device{spec.index}")
    transformers_logging.disable_progress_bar()  # a progress bar per load is noise in service logs
    threads = None
    if spec.device == "cpu":
        threads = ThreadPolicy(available_cores(), settings.torch_threads, OthersLoad())
        no_openmp_team()  # the loop's thread: light batches only (sie.gpu_proc.threads)
    namespace = Namespace(spec.instance, spec.supervisor_pid)
    control = ControlBlock.attach(namespace.control())
    configure_attention(settings.attention_backend)
    Graphs.enabled = settings.cuda_graphs
    stats, recorder = attach_device_stats(
        namespace, control, spec.index, spec.device, instrumentation=settings.instrumentation
    )
    feed = CatalogFeed(spec.catalog_fd, control)
    catalog = feed.catalog
    doorbell = Doorbell.attach(namespace.doorbell(spec.index, control.device_generation(spec.index)))
    device = spec.device
    batcher = Batcher(
        max_batch_requests=settings.max_batch_requests,
        max_batch_wait_s=settings.max_batch_wait_ms / 1000,
        max_pending_items=settings.max_concurrent_requests,
        max_batch_tokens=lambda slot: token_budget(
            registry.catalog.models[slot].profile().max_batch_tokens, device
        ),
    )
    registry, memory = keep_models(settings, spec, catalog, control, doorbell, batcher)
    inference = InferenceThread(
        Runner(torch.device(spec.device), threads),
        registry,
        wake=doorbell.ring,
        evict_other=memory.evict_for_oom,
        workers=1 if threads is None else concurrent_batches(available_cores(), settings.torch_threads),
    )
    loop = DeviceLoop(
        device_index=spec.index,
        namespace=namespace,
        control=control,
        doorbell=doorbell,
        eventfds=[EventFd(fd) for fd in spec.eventfds],
        registry=registry,
        batcher=batcher,
        inference=inference,
        supervisor_pid=spec.supervisor_pid,
        memory=memory,
        stats=recorder,
        catalog_feed=feed,
    )

    def stop(signum: int, _frame: object) -> None:
        log.info("stopping: finishing in-flight batches", extra={"signal": signum})
        loop.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the supervisor leads
    loop.mark_up()
    log.info("device up", extra={"device": spec.device, "models": len(catalog)})
    for slot in spec.preload_slots:
        registry.request_load(slot)
    try:
        loop.run()
    finally:
        control.set_device_state(spec.index, DeviceState.STOPPING)
        inference.stop()
        registry.close()
        loop.close()
        doorbell.close()
        stats.close()
    log.info("device stopped")
    return 0


def keep_models(
    settings: Settings,
    spec: DeviceSpec,
    catalog: Catalog,
    control: ControlBlock,
    doorbell: Doorbell,
    batcher: Batcher,
) -> tuple[Registry, MemoryManager]:
    """The registry of this device's models and the memory manager that decides what goes."""
    # A bound on a CPU device counts what the models hold (read from the registry made just below).
    probe = probe_for(spec.device, settings.device_memory_bytes, held_bytes=lambda: registry.held_bytes())
    loader = load_adapter
    if spec.device == "cpu" and onednn_wanted(settings.cpu_linear):
        loader = with_onednn_linears(load_adapter)
    registry = Registry(
        catalog,
        control,
        spec.index,
        spec.device,
        loader=loader,
        on_change=doorbell.ring,
        failure_cooldown_s=settings.load_failure_cooldown_s,
        release=probe.release,
        max_loras=settings.max_loras_per_model,
        # A CPU device's loads run on one thread: see sie.gpu_proc.threads.no_openmp_team.
        loader_thread_setup=no_openmp_team if spec.device == "cpu" else None,
    )
    memory = MemoryManager(
        registry,
        probe,
        control,
        spec.index,
        threshold_percent=settings.memory_pressure_threshold_percent,
        idle_evict_s=settings.idle_evict_s,
        pinned=spec.preload_slots,
        is_queued=lambda slot: batcher.pending_items(slot) > 0,
    )
    registry.before_load = memory.make_room
    if settings.cluster_cache:
        source = cluster_weights(settings, lambda: registry.catalog, control, spec.preload_slots)
        registry.weights = source.open
        registry.on_loader(source.cluster.connect)
    return registry, memory
