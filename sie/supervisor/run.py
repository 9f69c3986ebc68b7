"""`python -m sie serve`: bind once, start device owners and frontends, restart them, drain.

The supervisor never imports torch, starlette or hypercorn: it only owns names, file descriptors
and processes. It waits on one self-pipe that signal handlers write to (SIGCHLD, SIGTERM, SIGINT),
so a dead child is seen within milliseconds and a restart never waits on a poll interval.

Stopping has two phases. SIGTERM first marks the server as leaving: `/readyz` answers 503 at once
while requests are still served for `drain_delay_s`, so a balancer's health check takes it out of
rotation before anything is refused. Then the drain: frontends stop accepting and finish in-flight
requests, then the devices stop. A second SIGTERM or SIGINT skips what is left of the delay.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import select
import signal
import socket
import time

import msgspec

from sie.bearer_tokens import load_tokens, share_tokens
from sie.catalog import Catalog, preload_names
from sie.catalog_defaults import with_server_defaults
from sie.catalog_report import log_catalog
from sie.model_config import ModelConfigError
from sie.object_store import require_backend
from sie.settings import Settings, available_cores
from sie.shared_catalog import share_catalog, write_catalog
from sie.shm.control import DeviceState, ModelState
from sie.shm.names import Namespace, sweep_stale
from sie.specs import DeviceSpec, FrontendSpec
from sie.supervisor.catalog_source import CatalogSource
from sie.supervisor.children import Child, frontend_count, resolve_devices
from sie.supervisor.resources import SharedResources
from sie.supervisor.systemd import inherited_socket, sd_notify

log = logging.getLogger(__name__)

TICK_S = 0.2
DEVICE_STOP_TIMEOUT_S = 30.0


class Supervisor:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        if settings.cluster_cache:
            require_backend(settings.cluster_cache, "SIE_CLUSTER_CACHE")
        self.catalog_source = CatalogSource(
            settings.models_dir, settings.models, watch=settings.watch_models_dir
        )
        self.catalog = self._read_catalog()
        log_catalog(self.catalog)
        self.slot_capacity = len(self.catalog) + settings.spare_model_slots
        self.catalog_generation = 0
        self.reread_requested = False
        preload = preload_names(settings.preload, settings.default_model, self.catalog)
        self.preload_slots = [self.catalog.slot(name) for name in preload]
        self.catalog_fd = share_catalog(self.catalog)  # every child, restarted ones too, reads this
        self.device_names = resolve_devices(settings.device)
        self.auth_fd = share_tokens(load_tokens(settings))  # -1: no tokens, no authentication
        if settings.tracing_enabled and importlib.util.find_spec("opentelemetry.sdk") is None:
            raise ValueError("tracing needs OpenTelemetry: pip install 'sie[tracing]'")
        self.namespace = Namespace(settings.instance, os.getpid())
        self.devices = [Child("device", i) for i in range(len(self.device_names))]
        count = frontend_count(settings.frontends, self.device_names, available_cores())
        self.frontends = [Child("frontend", i) for i in range(count)]
        self.stopping = False
        self.stop_signals = 0
        self.is_ready = False
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # -- startup ---------------------------------------------------------------------------------------
    def run(self) -> int:
        removed = sweep_stale()
        if removed:
            log.info("removed stale shared memory of dead servers", extra={"count": len(removed)})
        settings = self.settings
        self.listener = inherited_socket() or bind(settings.host, settings.port, settings.listen_backlog)
        host, port = self.listener.getsockname()[:2]
        self.resources = SharedResources(
            self.namespace, self.settings, len(self.devices), len(self.frontends), self.slot_capacity
        )
        self._install_signals()
        try:
            for child in self.devices:
                self._start_device(child)
            for child in self.frontends:
                self._start_frontend(child)
            log.info(
                "sie listening on http://%s:%d",
                host,
                port,
                extra={"devices": self.device_names, "frontends": len(self.frontends)},
            )
            code = self._watch()
        finally:
            # Our copy of the socket goes first: once the draining frontends drop theirs, new
            # connections are refused at once instead of queueing behind a socket nobody accepts on.
            self.listener.close()
            self._stop_children()
            self.resources.close()
            for signum in (signal.SIGTERM, signal.SIGINT):  # a late signal must not turn exit 0 into -15
                signal.signal(signum, signal.SIG_IGN)
        log.info("sie stopped")
        return code

    def _install_signals(self) -> None:
        signal.set_wakeup_fd(self._wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is the point
        signal.signal(signal.SIGHUP, self._on_reread_signal)

    def _on_reread_signal(self, _signum: int, _frame: object) -> None:
        self.reread_requested = True

    def _on_stop_signal(self, signum: int, _frame: object) -> None:
        if not self.stopping:
            log.info("stopping on %s", signal.Signals(signum).name)
        self.stopping = True
        self.stop_signals += 1

    def _start_device(self, child: Child) -> None:
        spec = DeviceSpec(
            index=child.index,
            device=self.device_names[child.index],
            instance=self.namespace.instance,
            supervisor_pid=self.namespace.supervisor_pid,
            eventfds=self.resources.eventfd_numbers(),
            preload_slots=self.preload_slots,
            catalog_fd=self.catalog_fd,
        )
        self.resources.control.set_device_state(child.index, DeviceState.STARTING)
        child.start(self.settings, _encode(spec), (*spec.eventfds, spec.catalog_fd))
        self.resources.control.set_device_pid(child.index, child.pid or 0)

    def _start_frontend(self, child: Child) -> None:
        spec = FrontendSpec(
            index=child.index,
            instance=self.namespace.instance,
            supervisor_pid=self.namespace.supervisor_pid,
            eventfd=self.resources.eventfds[child.index].fd,
            listen_fd=self.listener.fileno(),
            catalog_fd=self.catalog_fd,
            device_names=device_labels(self.device_names),
            auth_fd=self.auth_fd,
        )
        inherited = [spec.eventfd, spec.listen_fd, spec.catalog_fd]
        if self.auth_fd >= 0:
            inherited.append(self.auth_fd)
        child.start(self.settings, _encode(spec), tuple(inherited))

    # -- steady state ------------------------------------------------------------------------------------
    def _watch(self) -> int:
        while not self.stopping:
            if not self._tick(TICK_S):
                return 1
            if not self.stopping:
                self._report_readiness()
        sd_notify("STOPPING=1")
        return self._linger()

    def _tick(self, timeout_s: float) -> bool:
        """Wait for a signal or a child's exit (at most `timeout_s`); False: give up the server."""
        select.select([self._wake_r], [], [], timeout_s)
        _drain_pipe(self._wake_r)
        self._kill_stalled_devices()
        self._follow_models_dir()
        alive = self._reap_and_restart()
        self._publish_stats()
        return alive

    # -- the live catalog --------------------------------------------------------------------------
    def _read_catalog(self) -> Catalog:
        return with_server_defaults(self.catalog_source.read(), self.settings)

    def _follow_models_dir(self) -> None:
        """Re-read the models directory on SIGHUP, or when the watcher saw a file change."""
        requested, self.reread_requested = self.reread_requested, False
        try:
            read = self.catalog_source.fresh(requested)
        except ModelConfigError as exc:
            log.error("models directory not re-read; serving the catalog as it was: %s", exc)
            return
        if read is None:
            return
        fresh = with_server_defaults(read, self.settings)
        revised = self.catalog.revised(fresh.models, list(fresh.unsupported.values()))
        if _same_catalog(revised, self.catalog):
            return
        if len(revised) > self.slot_capacity:
            log.error(
                "models directory changed beyond the %d spare model slots; restart to apply it",
                self.settings.spare_model_slots,
            )
            return
        before = set(self.catalog.names())
        self.catalog = revised
        self.catalog_generation += 1
        write_catalog(self.catalog_fd, revised, self.catalog_generation)
        self.resources.control.set_catalog_generation(
            self.catalog_generation
        )  # after the file: see shared_catalog
        log.info(
            "models directory re-read",
            extra={
                "added": sorted(set(revised.names()) - before),
                "removed": sorted(before - set(revised.names())),
                "models": len(revised.names()),
            },
        )
        log_catalog(revised)

    def _publish_stats(self) -> None:
        self.resources.publish_stats(
            ([c.pid or 0 for c in self.devices], [c.pid or 0 for c in self.frontends]),
            ([c.restarts for c in self.devices], [c.restarts for c in self.frontends]),
        )

    def _kill_stalled_devices(self) -> None:
        """A device whose loop stopped beating is stuck (its forwards run on another thread, so a long
        batch never silences it): kill it; the reaping below fails its requests and restarts it."""
        control = self.resources.control
        now_ns = time.monotonic_ns()
        for child in self.devices:
            if child.process is None or control.device_state(child.index) != DeviceState.UP:
                continue
            silent_s = (now_ns - control.heartbeat_ns(child.index)) / 1e9
            if silent_s > self.settings.device_stall_s:
                log.error("%s stalled (no heartbeat for %.1f s); killing it", child.name, silent_s)
                control.set_device_state(child.index, DeviceState.DOWN)  # not ready, no new requests
                child.process.kill()

    def _linger(self) -> int:
        """Not ready, still serving, for `drain_delay_s`: balancers move traffic before the drain."""
        self.resources.control.set_leaving()
        delay_s = self.settings.drain_delay_s
        if delay_s <= 0:
            return 0
        log.info("not ready; serving %.1f s more before draining", delay_s)
        deadline = time.monotonic() + delay_s
        while self.stop_signals < 2 and (left_s := deadline - time.monotonic()) > 0:
            if not self._tick(min(TICK_S, left_s)):
                return 1
        return 0

    def _reap_and_restart(self) -> bool:
        now = time.monotonic()
        for child in [*self.devices, *self.frontends]:
            if child.process is not None and child.process.poll() is not None:
                code = child.process.returncode
                child.process = None
                log.error("%s exited (code %s); restarting", child.name, code, extra={"pid_code": code})
                if child.role == "device":
                    self.resources.renew_device(child.index)  # fail its requests, fresh rings
                else:
                    self.resources.renew_frontend(child.index)
                if not child.schedule_restart(now):
                    log.critical("%s keeps crashing; giving up", child.name)
                    return False
            if child.process is None and child.restart_at_s is not None and now >= child.restart_at_s:
                (self._start_device if child.role == "device" else self._start_frontend)(child)
        return True

    def _report_readiness(self) -> None:
        control = self.resources.control
        ready = all(control.device_state(d) == DeviceState.UP for d in range(len(self.devices))) and all(
            control.model_state(d, s) == ModelState.LOADED
            for d in range(len(self.devices))
            for s in self.preload_slots
        )
        if ready and not self.is_ready:
            log.info("sie ready")
            control.set_started()  # from now on frontends judge readiness by the devices alone
            sd_notify("READY=1\nSTATUS=serving")
        self.is_ready = ready

    # -- shutdown --------------------------------------------------------------------------------------
    def _stop_children(self) -> None:
        """Frontends first (they finish in-flight requests), then the devices behind them."""
        log.info("draining")
        self.resources.control.set_draining()
        _terminate(self.frontends, self.settings.graceful_timeout_s + 5.0)
        _terminate(self.devices, DEVICE_STOP_TIMEOUT_S)


def _same_catalog(a: Catalog, b: Catalog) -> bool:
    """No slot added, none retired, the same files left out for the same reasons."""
    return len(a) == len(b) and a.active_slots() == b.active_slots() and a.unsupported == b.unsupported


def _terminate(children: list[Child], timeout_s: float) -> None:
    running = [c for c in children if c.process is not None and c.process.poll() is None]
    for child in running:
        child.process.terminate()  # type: ignore[union-attr]
    deadline = time.monotonic() + timeout_s
    for child in running:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))  # type: ignore[union-attr]
        except Exception:
            log.error("%s did not stop in time; killing it", child.name)
            child.process.kill()  # type: ignore[union-attr]
            child.process.wait()  # type: ignore[union-attr]


def device_labels(names: list[str]) -> list[str]:
    """Names for /v1/models: `cpu,cpu` (tests, CPU boxes) become `cpu:0,cpu:1` so each is told apart."""
    return [f"{name}:{i}" if names.count(name) > 1 else name for i, name in enumerate(names)]


def bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


def _encode(spec: DeviceSpec | FrontendSpec) -> str:
    return msgspec.json.encode(spec).decode()


def _drain_pipe(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
