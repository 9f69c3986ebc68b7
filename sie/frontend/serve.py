"""Frontend process entry point: serve the app with hypercorn on the supervisor's socket."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable

from hypercorn.asyncio import serve
from hypercorn.config import Config

from sie.frontend.app import build_app
from sie.frontend.devices import DeviceClient
from sie.frontend.state import FrontendState
from sie.frontend.tokenize import TokenizerCache
from sie.logs import configure_logging
from sie.model_config import load_catalog, preload_names
from sie.settings import Settings
from sie.shm.control import ControlBlock
from sie.shm.doorbell import EventFd
from sie.shm.names import Namespace
from sie.specs import FrontendSpec

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5


def main(settings: Settings, spec: FrontendSpec) -> int:
    configure_logging(settings.log_level, settings.log_format, f"frontend{spec.index}")
    asyncio.run(_serve(settings, spec))
    return 0


def hypercorn_config(settings: Settings, listen_fd: int) -> Config:
    config = Config()
    config.bind = [f"fd://{listen_fd}"]
    config.graceful_timeout = settings.graceful_timeout_s
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")  # through our handlers, once
    config.keep_alive_timeout = 75  # longer than common client pools keep idle connections
    return config


async def _serve(settings: Settings, spec: FrontendSpec) -> None:
    namespace = Namespace(spec.instance, spec.supervisor_pid)
    control = ControlBlock.attach(namespace.control())
    catalog = load_catalog(settings.models_dir, settings.models)
    client = DeviceClient(
        namespace,
        control,
        spec.index,
        EventFd(spec.eventfd),
        settings.request_timeout_s,
        device_names=spec.device_names,
    )
    state = FrontendState(
        settings=settings,
        catalog=catalog,
        devices=client,
        tokenizers=TokenizerCache(),
        preload_slots=[
            catalog.slot(n) for n in preload_names(settings.preload, settings.default_model, catalog)
        ],
    )
    for slot in state.preload_slots:  # load tokenizers now, not on the first request
        state.tokenizers.get(catalog.models[slot])
    loop = asyncio.get_running_loop()
    client.start(loop)
    shutdown = asyncio.Event()

    def drain() -> None:
        log.info("draining: no new connections, finishing in-flight requests")
        state.is_draining = True
        shutdown.set()

    loop.add_signal_handler(signal.SIGTERM, drain)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the supervisor leads
    watcher = loop.create_task(_watch_parent(spec.supervisor_pid, drain))
    log.info("frontend serving")
    try:
        await serve(
            build_app(state), hypercorn_config(settings, spec.listen_fd), shutdown_trigger=shutdown.wait
        )
    finally:
        watcher.cancel()
        await client.stop()
        control.close()
    log.info("frontend stopped")


async def _watch_parent(supervisor_pid: int, drain: Callable[[], None]) -> None:
    while os.getppid() == supervisor_pid:
        await asyncio.sleep(PARENT_CHECK_S)
    log.error("supervisor is gone; frontend exits")
    drain()
