"""Frontend process entry point: serve the app with hypercorn on the supervisor's socket."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Callable

from hypercorn.asyncio import serve
from hypercorn.config import Config

from sie.bearer_tokens import read_shared_tokens
from sie.catalog import Catalog, preload_names
from sie.errors import ModelLoadFailed
from sie.frontend import h11_writes
from sie.frontend.app import build_app
from sie.frontend.devices import DeviceClient
from sie.frontend.exposition import Sources
from sie.frontend.media import resample
from sie.frontend.operations import Operations
from sie.frontend.placement import ReplicaWatch
from sie.frontend.rebalance import ConnectionRebalancer
from sie.frontend.state import TEXT_STATE_IDLE_S, FrontendState
from sie.frontend.tokenize import TokenizerCache, reads_text_tokenizer
from sie.heap import HeapTrimmer
from sie.logs import configure_logging
from sie.metrics.block import StatsBlock
from sie.metrics.recorders import FrontendRecorder
from sie.model_location import weights_present
from sie.settings import Settings
from sie.shared_catalog import CatalogFeed
from sie.shm.control import ControlBlock
from sie.shm.doorbell import EventFd
from sie.shm.names import Namespace
from sie.specs import FrontendSpec

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5
TEXT_STATE_SWEEP_S = 10.0  # how often a frontend looks for idle models' text state
# Container allocations (net of frees) before the cyclic collector's youngest generation runs.
# CPython's 700 is less than what a busy frontend's in-flight requests hold at once, so it ran
# every few requests and each run walked all of them (about 30 us of CPU a request); answered
# requests leave no cycles behind (sie.frontend.client_watch), so there is little to find.
YOUNG_GC_THRESHOLD = 10_000


def main(settings: Settings, spec: FrontendSpec) -> int:
    configure_logging(settings.log_level, settings.log_format, f"frontend{spec.index}")
    gc.set_threshold(YOUNG_GC_THRESHOLD)  # the older generations keep their thresholds
    if settings.frontend_nice > 0:
        os.nice(settings.frontend_nice)
    with asyncio.Runner(loop_factory=event_loop_factory(settings.event_loop)) as runner:
        runner.run(_serve(settings, spec))
    return 0


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when asked for or (auto) installed: it roughly halves the event loop's own cost."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def operations(
    settings: Settings, spec: FrontendSpec, stats: StatsBlock, control: ControlBlock, catalog: Catalog
) -> Operations:
    """Tokens from the supervisor's memfd, this frontend's statistics rows, the connection
    rebalancer (with several frontends), tracing if enabled."""
    names = spec.device_names or [f"device{d}" for d in range(control.n_devices)]
    recorder = FrontendRecorder(stats, spec.index)
    rebalancer = None
    if settings.rebalance_connections and len(recorder.all_in_flight) > 1:
        rebalancer = ConnectionRebalancer(recorder.all_in_flight, spec.index)
    tracer = None
    if settings.tracing_enabled:
        from sie.frontend.tracing import tracer_from_environment

        tracer = tracer_from_environment(f"{spec.instance}/frontend{spec.index}")
    return Operations(
        auth_tokens=read_shared_tokens(spec.auth_fd),
        protect_metrics=settings.metrics_auth,
        recorder=recorder,
        sources=Sources(stats, control, catalog.slot_names(), names),
        tracer=tracer,
        rebalancer=rebalancer,
    )


def hypercorn_config(settings: Settings, listen_fd: int) -> Config:
    config = Config()
    config.include_server_header = False  # ours (`server: sie/<version>`) goes on every response
    config.bind = [f"fd://{listen_fd}"]
    config.graceful_timeout = settings.graceful_timeout_s
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handlers, once
    config.keep_alive_timeout = 75  # longer than common client pools keep idle connections
    config.backlog = settings.listen_backlog  # hypercorn listens again on the shared socket: keep ours
    return config


async def _serve(settings: Settings, spec: FrontendSpec) -> None:
    namespace = Namespace(spec.instance, spec.supervisor_pid)
    control = ControlBlock.attach(namespace.control())
    feed = CatalogFeed(spec.catalog_fd, control)
    catalog = feed.catalog
    client = DeviceClient(
        namespace,
        control,
        spec.index,
        EventFd(spec.eventfd),
        settings.request_timeout_s,
        device_names=spec.device_names,
        load_failure_cooldown_s=settings.load_failure_cooldown_s,
        replicas=ReplicaWatch(settings.replica_queue_depth, settings.replica_after_s),
    )
    stats = StatsBlock.attach(namespace.stats())
    state = FrontendState(
        settings=settings,
        catalog=catalog,
        devices=client,
        ops=operations(settings, spec, stats, control, catalog),
        tokenizers=TokenizerCache(),
        feed=feed,
        preload_slots=[
            catalog.slot(n) for n in preload_names(settings.preload, settings.default_model, catalog)
        ],
    )
    for slot in state.preload_slots:  # load tokenizers now, not on the first request
        config = catalog.models[slot]
        # Without its files a device copies them first (a cluster cache).
        if weights_present(config) and reads_text_tokenizer(config):
            try:
                state.tokenizers.get(config)
            except ModelLoadFailed as exc:  # a slow tokenizer the device converts as it loads, or none
                extra = {"model": config.sie_id, "error": exc.message}
                log.info("tokenizer not loaded at start", extra=extra)
    # Only for image models whose weights are here: a built-in catalog entry never downloaded costs nothing.
    if any("image" in config.input_kinds() and weights_present(config) for config in catalog.active_models()):
        state.media.start(resample.warm)  # compile the resize loops now, not on the first image
    loop = asyncio.get_running_loop()
    client.start(loop)
    h11_writes.install()
    shutdown = asyncio.Event()

    def drain() -> None:
        log.info("draining: no new connections, finishing in-flight requests")
        state.is_draining = True
        shutdown.set()

    loop.add_signal_handler(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the supervisor leads
    watcher = loop.create_task(_watch_parent(spec.supervisor_pid, drain))
    recorder = state.ops.recorder
    heap = loop.create_task(_tend_heap(recorder)) if recorder is not None else None
    text_state = loop.create_task(release_idle_text_state(state))
    log.info("frontend serving")
    try:
        await serve(
            build_app(state), hypercorn_config(settings, spec.listen_fd), shutdown_trigger=shutdown.wait
        )
    finally:
        watcher.cancel()
        text_state.cancel()
        if heap is not None:
            heap.cancel()
        await client.stop()
        state.media.close()
        control.close()
        stats.close()
    log.info("frontend stopped")


async def _tend_heap(recorder: FrontendRecorder, trimmer: HeapTrimmer | None = None) -> None:
    """Give freed memory back at a moment with no request in flight (see sie.heap)."""
    trimmer = trimmer or HeapTrimmer()
    seen = 0
    while True:
        await asyncio.sleep(PARENT_CHECK_S)
        if recorder.started_total != seen:
            seen = recorder.started_total
            trimmer.busy()
        if recorder.in_flight == 0:
            trimmer.idle(time.monotonic())


async def release_idle_text_state(
    state: FrontendState, every_s: float = TEXT_STATE_SWEEP_S, idle_s: float = TEXT_STATE_IDLE_S
) -> None:
    """Every `every_s`, drop the text state of models idle here that no device holds (see
    `FrontendState.release_idle_text_state`), in a frontend with traffic or without."""
    while True:
        await asyncio.sleep(every_s)
        state.release_idle_text_state(idle_s)


async def _watch_parent(supervisor_pid: int, drain: Callable[[], None]) -> None:
    while os.getppid() == supervisor_pid:
        await asyncio.sleep(PARENT_CHECK_S)
    log.error("supervisor is gone; frontend exits")
    drain()
