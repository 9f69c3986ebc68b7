"""The frontend's side of the rings: submit token batches, await their results, fail fast.

One `DeviceClient` per frontend process. Results arrive on response rings; the device writes this
frontend's eventfd once per batch, and `_on_wake` (in the event loop thread, no extra thread)
drains every response ring and fills the pending requests. A device whose generation changed, or
that is DOWN, fails every request pending on it at once: timeouts are only a backstop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from sie.errors import (
    DeviceUnavailable,
    InferenceError,
    InputTooLong,
    InvalidInput,
    LoraLoading,
    ModelLoadFailed,
    ModelLoading,
    QueueFull,
    ResourceExhausted,
    SieError,
)
from sie.frontend.placement import ReplicaWatch, least_loaded, loadable_devices
from sie.frontend.results import ResultAssembler, Results
from sie.shm.control import ControlBlock, DeviceState, ModelState, ModelUsage
from sie.shm.doorbell import Doorbell, EventFd
from sie.shm.layout import (
    Op,
    ResultBlock,
    Status,
    TokenBatch,
    decode_result,
    encode_request,
    request_nbytes,
)
from sie.shm.names import Namespace
from sie.shm.ring import PayloadTooLarge, Ring, RingMissing

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.1
REPLICA_CHECK_S = 1.0


@dataclass(slots=True)
class PendingRequest:
    future: asyncio.Future[Results]
    device: int
    assembler: ResultAssembler

    def fail(self, error: SieError) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def expire(self) -> None:
        self.fail(DeviceUnavailable("The device did not answer in time; retry shortly"))

    def add(self, block: ResultBlock) -> None:
        if block.status != Status.OK:
            self.fail(_status_error(block))
            return
        self.assembler.add(block)
        if self.assembler.is_complete and not self.future.done():
            self.future.set_result(self.assembler.results())


def _status_error(block: ResultBlock) -> SieError:
    if block.status == Status.QUEUE_FULL:
        return QueueFull("Too many pending items for this model; retry shortly")
    if block.status == Status.MODEL_NOT_LOADED:
        return ModelLoading("Model is loading; retry shortly")
    if block.status == Status.OUT_OF_MEMORY:
        return ResourceExhausted(f"Out of device memory: {block.message}")
    if block.status == Status.INVALID:
        return InvalidInput(block.message or "the model cannot serve this request")
    if block.status == Status.LORA_LOADING:
        return LoraLoading(f"{block.message or 'LoRA adapter is loading'}; retry shortly")
    if block.status == Status.LORA_FAILED:
        return ModelLoadFailed(block.message or "LoRA adapter failed to load")
    return InferenceError(block.message or f"device answered {Status(block.status).name}")


@dataclass(slots=True)
class DeviceLink:
    """This frontend's rings with one device, at one pair generation."""

    index: int
    generation: int
    device_generation: int
    requests: Ring
    results: Ring
    doorbell: Doorbell
    pending: set[int] = field(default_factory=set)

    def close(self) -> None:
        self.requests.close()
        self.results.close()
        self.doorbell.close()


@dataclass(frozen=True, slots=True)
class Placement:
    """One device's hold on one model, for /v1/models."""

    device: str  # "cpu", "cuda:0"
    state: ModelState
    usage: ModelUsage


class Devices(Protocol):
    """What the HTTP layer needs from the device side; tests substitute a fake."""

    def is_draining(self) -> bool: ...
    def model_state(self, slot: int) -> ModelState: ...
    def placements(self, slot: int) -> list[Placement]: ...
    def model_error(self, slot: int) -> str: ...
    def is_ready(self, preload_slots: list[int]) -> bool: ...
    def can_retry_load(self, slot: int) -> bool: ...
    def loads(self, slot: int) -> int: ...
    def request_load(self, slot: int) -> None: ...
    async def submit(self, batch: TokenBatch) -> Results: ...


class DeviceClient:
    def __init__(
        self,
        namespace: Namespace,
        control: ControlBlock,
        frontend: int,
        wake: EventFd,
        request_timeout_s: float = 300.0,
        device_names: list[str] | None = None,
        *,
        load_failure_cooldown_s: float = 60.0,
        replicas: ReplicaWatch | None = None,
    ) -> None:
        self.namespace = namespace
        self.device_names = device_names or [f"device{d}" for d in range(control.n_devices)]
        self.request_timeout_s = request_timeout_s
        self.load_failure_cooldown_s = load_failure_cooldown_s
        self.replicas = replicas or ReplicaWatch(queue_depth=0, after_s=0.0)
        self._replicas_due_s = 0.0
        self.control = control
        self.frontend = frontend
        self.wake = wake
        self.links: dict[int, DeviceLink] = {}
        self.pending: dict[int, PendingRequest] = {}
        # Request ids embed the pid, so a restarted frontend never mistakes an old result for its own.
        self._ids = itertools.count((os.getpid() & 0xFFFFFF) << 32)
        self._rr = itertools.count()
        self._watchdog: asyncio.Task[None] | None = None
        self._to_ring: dict[int, DeviceLink] = {}  # devices to wake at the end of this loop turn

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.wake.watch(loop, self._on_wake)
        self._watchdog = loop.create_task(self._watch())

    async def stop(self) -> None:
        self.wake.unwatch()
        if self._watchdog is not None:
            self._watchdog.cancel()
        for link in self.links.values():
            link.close()
        self.links.clear()

    async def _watch(self) -> None:
        """The backstop: notice dead devices and stray results without a wakeup; place replicas."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            try:
                self._on_wake()
                self._place_replicas()
            except Exception:  # this task must outlive any one bad moment, or requests hang
                log.exception("device watch failed; carrying on")

    def _place_replicas(self) -> None:
        now = time.monotonic()
        if now < self._replicas_due_s:  # a sweep over every model: once a second is plenty
            return
        self._replicas_due_s = now + REPLICA_CHECK_S
        up = self._up_devices()
        for slot in self.replicas.deep_models(self.control, up, now):
            if targets := loadable_devices(self.control, up, slot, self.load_failure_cooldown_s):
                log.info("queue stays deep; placing another replica", extra={"slot": slot})
                self._order_load(least_loaded(self.control, targets), slot)

    # -- state -------------------------------------------------------------------------------------
    def _up_devices(self) -> list[int]:
        return [d for d in range(self.control.n_devices) if self.control.device_state(d) == DeviceState.UP]

    def is_draining(self) -> bool:
        return self.control.is_draining

    def model_state(self, slot: int) -> ModelState:
        """The best state across devices: loaded anywhere beats loading beats available."""
        states = {self.control.model_state(d, slot) for d in self._up_devices()}
        order = (ModelState.LOADED, ModelState.LOADING, ModelState.UNLOADING, ModelState.AVAILABLE)
        for state in (*order, ModelState.FAILED):
            if state in states:
                return state
        return ModelState.AVAILABLE

    def placements(self, slot: int) -> list[Placement]:
        """Where a model is loading, loaded or failed, on devices that are up."""
        return [
            Placement(self.device_names[d], state, self.control.model_usage(d, slot))
            for d in self._up_devices()
            if (state := self.control.model_state(d, slot)) != ModelState.AVAILABLE
        ]

    def model_error(self, slot: int) -> str:
        """The error of the latest failed load of this model on any device."""
        failed = [
            d for d in range(self.control.n_devices) if self.control.model_state(d, slot) == ModelState.FAILED
        ]
        latest = max(failed, key=lambda d: self.control.model_state_ns(d, slot), default=None)
        return "" if latest is None else self.control.model_error(latest, slot)

    def loads(self, slot: int) -> int:
        """How many times the devices loaded this model since the server started."""
        return int(self.control.models["loads"][:, slot].sum())

    def can_retry_load(self, slot: int) -> bool:
        """Some up device may load this model again (its failure is older than the cool-down)."""
        return bool(loadable_devices(self.control, self._up_devices(), slot, self.load_failure_cooldown_s))

    def is_ready(self, preload_slots: list[int]) -> bool:
        """Ready for a balancer: started, not leaving, and some device can serve right now.

        Never a function of load: an overloaded server answers its clients 503 QUEUE_FULL itself.
        A balancer that took it out instead would move its models to a neighbour (cold loads there).
        """
        control = self.control
        if not control.is_started or control.is_leaving or control.is_draining:
            return False
        return any(
            all(control.model_state(d, s) == ModelState.LOADED for s in preload_slots)
            for d in self._up_devices()
        )

    # -- submitting ----------------------------------------------------------------------------------
    def request_load(self, slot: int) -> None:
        """Ask one device to load a model: of those that may, the least loaded by memory."""
        up = self._up_devices()
        if not up:
            raise DeviceUnavailable("No device is available; retry shortly")
        targets = loadable_devices(self.control, up, slot, self.load_failure_cooldown_s)
        if targets:
            self._order_load(least_loaded(self.control, targets), slot)

    def _order_load(self, device: int, slot: int) -> None:
        order = TokenBatch(
            req_id=next(self._ids),
            op=Op.LOAD_MODEL,
            model_slot=slot,
            offsets=np.zeros(1, np.int32),
            input_ids=np.zeros(0, np.int32),
        )
        self._push(self._link(device), [encode_request(order)])

    async def submit(self, batch: TokenBatch) -> Results:
        """Submit one request's tokens; resolve with every kind its output mask asks for."""
        device = self._pick_device(batch.model_slot)
        link = self._link(device)
        req_id = next(self._ids)
        payloads = [encode_request(chunk) for chunk in _chunks(batch, req_id, link)]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Results] = loop.create_future()
        request = PendingRequest(future, device, ResultAssembler(batch.n_items, batch.output_mask))
        self.pending[req_id] = request
        link.pending.add(req_id)
        # A timer that fails the future, rather than wait_for: the same backstop without the
        # wrapping future and callbacks wait_for adds to every request.
        deadline = loop.call_later(self.request_timeout_s, request.expire)
        try:
            self._push(link, payloads)
            return await future
        except asyncio.CancelledError:  # the client left (sie.frontend.client_watch)
            self._withdraw(link, req_id, batch.model_slot)
            raise
        finally:
            deadline.cancel()
            self.pending.pop(req_id, None)
            link.pending.discard(req_id)

    def _withdraw(self, link: DeviceLink, req_id: int, slot: int) -> None:
        """Tell the device to drop this request's items that have not run yet (best effort)."""
        request = self.pending.get(req_id)
        answered = request is not None and request.future.done() and not request.future.cancelled()
        if answered or self.links.get(link.index) is not link:
            return  # nothing left to drop, or the device restarted and forgot the request anyway
        cancel = TokenBatch(
            req_id=req_id,
            op=Op.CANCEL,
            model_slot=slot,
            offsets=np.zeros(1, np.int32),
            input_ids=np.zeros(0, np.int32),
        )
        with contextlib.suppress(SieError):  # a full ring: the items simply run, and are ignored
            self._push(link, [encode_request(cancel)])

    def _pick_device(self, slot: int) -> int:
        loaded = [d for d in self._up_devices() if self.control.model_state(d, slot) == ModelState.LOADED]
        if not loaded:
            raise ModelLoading("Model is loading; retry shortly")
        if len(loaded) == 1:
            return loaded[0]
        # Least loaded: items queued on the device (from every frontend) plus this frontend's requests
        # in flight there; ties broken round-robin.
        turn = next(self._rr)
        depths = self.control.models["queue_depth"]

        def load(d: int) -> tuple[int, int]:
            return int(depths[d, slot]) + len(self._link(d).pending), (d - turn) % len(loaded)

        return min(loaded, key=load)

    def _push(self, link: DeviceLink, payloads: list[np.ndarray]) -> None:
        for payload in payloads:
            try:
                pushed = link.requests.try_push(payload, int(payload[:8].view("<u8")[0]))
            except PayloadTooLarge:
                raise InputTooLong("Request is too large for the device queue; split it") from None
            if not pushed:
                raise QueueFull("Device queue is full; retry shortly")
        self._ring_soon(link)

    def _ring_soon(self, link: DeviceLink) -> None:
        """Wake the device once per event-loop turn, for every request pushed during that turn:
        under load many requests arrive in one turn, and each semaphore post costs a system call."""
        if not self._to_ring:
            try:
                asyncio.get_running_loop().call_soon(self._ring_pending)
            except RuntimeError:  # no loop running (a synchronous caller): ring at once
                link.doorbell.ring()
                return
        self._to_ring[link.index] = link

    def _ring_pending(self) -> None:
        links, self._to_ring = self._to_ring, {}
        for index, link in links.items():
            if self.links.get(index) is link:  # replaced meanwhile: its requests were failed
                link.doorbell.ring()

    def _link(self, device: int) -> DeviceLink:
        """The current rings to a device, reattaching when the supervisor replaced them."""
        generation = self.control.pair_generation(device, self.frontend)
        link = self.links.get(device)
        if link is not None and link.generation == generation:
            return link
        if link is not None:
            self._fail_link(link, DeviceUnavailable("Device restarted; retry shortly"))
        if self.control.device_state(device) != DeviceState.UP:
            raise DeviceUnavailable("Device is restarting; retry shortly")
        device_generation = self.control.device_generation(device)
        try:
            with contextlib.ExitStack() as opened:  # closes what was opened if a later attach fails
                requests = Ring.attach(self.namespace.ring(device, self.frontend, generation, "req"))
                opened.callback(requests.close)
                results = Ring.attach(self.namespace.ring(device, self.frontend, generation, "resp"))
                opened.callback(results.close)
                doorbell = Doorbell.attach(self.namespace.doorbell(device, device_generation))
                opened.pop_all()
        except (RingMissing, OSError) as exc:
            raise DeviceUnavailable(f"Device is restarting; retry shortly ({exc})") from None
        link = DeviceLink(device, generation, device_generation, requests, results, doorbell)
        self.links[device] = link
        return link

    def _fail_link(self, link: DeviceLink, error: SieError) -> None:
        for req_id in list(link.pending):
            if (request := self.pending.get(req_id)) is not None:
                request.fail(error)
        link.pending.clear()
        link.close()
        self.links.pop(link.index, None)

    # -- results ---------------------------------------------------------------------------------------
    def _on_wake(self) -> None:
        for link in list(self.links.values()):
            if not self._is_current(link):
                log.warning("device went away; failing its requests", extra={"device": link.index})
                self._fail_link(link, DeviceUnavailable("Device failed; retry shortly"))
                continue
            while (message := link.results.try_pop()) is not None:
                try:
                    block = decode_result(message.view)
                    request = self.pending.get(block.req_id)
                    if request is not None:
                        request.add(block)  # copies values out of the ring
                except Exception:
                    # One bad message fails its own request (the slot's tag is its id), not the watcher.
                    log.exception("bad result message", extra={"device": link.index, "req_id": message.tag})
                    if (request := self.pending.get(message.tag)) is not None:
                        request.fail(InferenceError("The device sent a result that could not be read"))
                finally:
                    link.results.release(message)

    def _is_current(self, link: DeviceLink) -> bool:
        device = link.index
        return (
            self.control.device_state(device) in (DeviceState.UP, DeviceState.STOPPING)
            and self.control.device_generation(device) == link.device_generation
            and self.control.pair_generation(device, self.frontend) == link.generation
        )


def _chunks(batch: TokenBatch, req_id: int, link: DeviceLink) -> list[TokenBatch]:
    """Split a request whose message would not fit comfortably in the ring into item runs."""
    if batch.pixels is not None or batch.samples is not None:  # sized by sie.frontend.media.submit
        return [replace(batch, req_id=req_id, submit_ns=time.monotonic_ns())]
    limit = link.requests.max_payload_bytes // 2
    has_types, has_aux, flags = batch.token_type_ids is not None, batch.aux is not None, batch.flags
    chunks: list[TokenBatch] = []
    start, n = 0, batch.n_items
    submit_ns = time.monotonic_ns()
    while start < n or not chunks:
        end = start + 1
        while (
            end < n
            and request_nbytes(end + 1 - start, int(batch.offsets[end + 1] - batch.offsets[start]), flags)
            <= limit
        ):
            end += 1
        lo, hi = int(batch.offsets[start]), int(batch.offsets[min(end, n)])
        chunks.append(
            TokenBatch(
                req_id=req_id,
                op=batch.op,
                model_slot=batch.model_slot,
                offsets=batch.offsets[start : end + 1] - lo,
                input_ids=batch.input_ids[lo:hi],
                token_type_ids=batch.token_type_ids[lo:hi] if has_types else None,
                aux=batch.aux[lo:hi] if has_aux else None,
                is_query=batch.is_query,
                item_base=start,
                output_mask=batch.output_mask,
                config_key=batch.config_key,
                submit_ns=submit_ns,
                scalar=batch.scalar,
            )
        )
        start = end
    return chunks
