"""The stages every task shares: gate on model state, tokenize off the event loop, submit to a device.

Each task (`sie.frontend.tasks.encode`, `score`, `extract`) is these stages plus its own prompt
building and post-processing; the routes only parse and render.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sie.errors import InputTooLong, ModelLoadFailed, ModelLoading, QueueFull, ShuttingDown
from sie.frontend.observe import note_work
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tokenize import Encoded
from sie.model_location import weights_present
from sie.shm.control import ModelState
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

T = TypeVar("T")

# Tokenizing a large request takes long enough to stall other connections; above this many
# items it runs on a worker thread (the Rust tokenizer releases the GIL).
INLINE_TOKENIZE_ITEMS = 16


@dataclass(frozen=True, slots=True)
class TokenResults:
    """A task's device results with the timings of the stages that made them."""

    results: Results
    input_tokens: int
    tokenization_ms: float

    @property
    def queue_ms(self) -> float:
        return self.results.queue_ms

    @property
    def inference_ms(self) -> float:
        return self.results.inference_ms


def check_serving(state: FrontendState) -> None:
    if state.is_draining or state.devices.is_draining():
        raise ShuttingDown("Server is shutting down; retry on another instance")


def gate_model(state: FrontendState, slot: int, name: str) -> None:
    """Raise unless the model is loaded somewhere; the first request for it starts the load.

    A failed model answers 502 for the cool-down; the first request after it retries the load.
    """
    devices = state.devices
    model_state = devices.model_state(slot)
    if model_state == ModelState.LOADED:
        return
    if model_state == ModelState.FAILED and not devices.can_retry_load(slot):
        raise ModelLoadFailed(f"Model '{name}' failed to load: {devices.model_error(slot)}")
    if model_state in (ModelState.AVAILABLE, ModelState.FAILED):
        devices.request_load(slot)
    raise ModelLoading(f"Model '{name}' is loading; retry shortly")


def admit(state: FrontendState, target: Target, n_items: int, *, needs_device: bool = True) -> None:
    """Checks before any work: the server serves, the request could ever fit (and, for work that
    `needs_device`, the model is loaded and its queue has room)."""
    check_serving(state)
    limit = state.settings.max_concurrent_requests
    if n_items > limit:  # could never be admitted: no retry would help
        raise InputTooLong(f"Request has {n_items} items; at most {limit} can be queued for one model")
    if needs_device:
        try:
            gate_model(state, target.slot, target.name)
        except ModelLoading:
            if weights_present(target.config):  # once a fetch is done, while the device loads them
                state.tokenizers.warm(target.config)
            raise
        check_room(state, target, n_items, limit)


def check_room(state: FrontendState, target: Target, n_items: int, limit: int) -> None:
    """503 QUEUE_FULL before tokenizing when no device holding the model has room for the items.

    The queue depths are the devices' own, published every few milliseconds; a device still
    refuses what no longer fits when the items reach it. Refusing here keeps an overloaded
    server's refusals cheap, so the frontends' CPU goes to the requests that are served.
    """
    placed = state.devices.placements(target.slot)
    depths = [p.usage.queue_depth for p in placed if p.state == ModelState.LOADED]
    if depths and min(depths) + n_items > limit:
        raise QueueFull("Too many pending items for this model; retry shortly")


async def tokenize(fn: Callable[[], T], n_items: int) -> tuple[T, float]:
    """Run a tokenizing closure, on a worker thread when the request is large; (result, ms)."""
    started = time.perf_counter()
    result = await asyncio.to_thread(fn) if n_items > INLINE_TOKENIZE_ITEMS else fn()
    return result, (time.perf_counter() - started) * 1000


async def submit(
    state: FrontendState,
    target: Target,
    encoded: Encoded,
    *,
    op: Op,
    kinds: set[ResultKind],
    key: int | None = None,  # None: the target's (profile and LoRA adapter)
    is_query: bool = False,
    tokenization_ms: float = 0.0,
    scalar: float = 0.0,  # the request's float parameter (sie.shm.layout.TokenBatch.scalar)
) -> TokenResults:
    batch = TokenBatch(
        req_id=0,
        op=op,
        model_slot=target.slot,
        offsets=encoded.offsets,
        input_ids=encoded.input_ids,
        token_type_ids=encoded.token_type_ids,
        output_mask=mask_of(kinds),
        config_key=target.batch_key() if key is None else key,
        aux=encoded.aux,
        is_query=is_query,
        scalar=scalar,
    )
    results = await state.devices.submit(batch)
    note_work(batch.n_items, encoded.n_tokens, tokenization_ms, results.queue_ms, results.inference_ms)
    return TokenResults(results, encoded.n_tokens, tokenization_ms)
