"""The stages every task shares: gate on model state, tokenize off the event loop, submit to a device.

Each task (`sie.frontend.tasks.encode`, `score`, `extract`) is these stages plus its own prompt
building and post-processing; the routes only parse and render.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sie.errors import InputTooLong, InvalidInput, ModelLoadFailed, ModelLoading, ShuttingDown
from sie.frontend.observe import note_work
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.frontend.tokenize import Encoded
from sie.model_config import ModelConfig
from sie.shm.control import ModelState
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of, with_lora

T = TypeVar("T")

# Tokenizing a large request takes long enough to stall other connections; above this many
# items it runs on a worker thread (the Rust tokenizer releases the GIL).
INLINE_TOKENIZE_ITEMS = 16


@dataclass(frozen=True, slots=True)
class Submitted:
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


def admit(
    state: FrontendState, name: str, n_items: int, profile: str | None = None, *, needs_device: bool = True
) -> tuple[int, ModelConfig]:
    """Checks before any work: the model exists, the server serves, the request could ever fit (and,
    for work that `needs_device`, the model is loaded)."""
    slot, config = state.model(name)
    check_serving(state)
    limit = state.settings.max_concurrent_requests
    if n_items > limit:  # could never be admitted: no retry would help
        raise InputTooLong(f"Request has {n_items} items; at most {limit} can be queued for one model")
    if profile is not None and profile not in config.profiles:
        if profile in config.refused_profiles:
            reason = config.refused_profiles[profile]
            raise InvalidInput(f"Profile '{profile}' of model '{name}' is not served here: {reason}")
        known = ", ".join(sorted(config.profiles)) or "default"
        raise InvalidInput(f"Unknown profile '{profile}' for model '{name}'. Available: {known}")
    if needs_device:
        gate_model(state, slot, name)
    return slot, config


async def tokenize(fn: Callable[[], T], n_items: int) -> tuple[T, float]:
    """Run a tokenizing closure, on a worker thread when the request is large; (result, ms)."""
    started = time.perf_counter()
    result = await asyncio.to_thread(fn) if n_items > INLINE_TOKENIZE_ITEMS else fn()
    return result, (time.perf_counter() - started) * 1000


def config_key(profile: str, *extra: str) -> int:
    """Items share a device batch only when this key (profile, LoRA, ...) matches."""
    return zlib.crc32("\0".join((profile, *extra)).encode())


def lora_config_key(config: ModelConfig, profile: str, lora: str | None) -> int:
    """The batch key of a request with a LoRA adapter, which also tells the device which one."""
    if lora is None:
        return config_key(profile)
    return with_lora(config_key(profile, lora), lora_index(config, lora))


def lora_option(config: ModelConfig, options: dict[str, Any] | None) -> str | None:
    """`options.lora` (what sie-sdk sends) or `options.lora_id`, checked against the model's `loras`."""
    lora = (options or {}).get("lora") or (options or {}).get("lora_id")
    if lora is None:
        return None
    if not isinstance(lora, str):
        raise InvalidInput("options.lora must be a string")
    lora_index(config, lora)  # an unknown adapter is a 400 before any load or queueing
    return lora


def lora_index(config: ModelConfig, lora: str) -> int:
    """1 + the adapter's position among the model's sorted `loras`; 400 for an unknown one."""
    names = sorted(config.loras)
    if lora not in config.loras:
        known = ", ".join(names) or "none"
        raise InvalidInput(f"Unknown LoRA adapter '{lora}' for model '{config.sie_id}'. Available: {known}")
    return names.index(lora) + 1


async def submit(
    state: FrontendState,
    slot: int,
    encoded: Encoded,
    *,
    op: Op,
    kinds: set[ResultKind],
    key: int,
    is_query: bool = False,
    tokenization_ms: float = 0.0,
    temperature: float = 0.0,  # the batch's float parameter (gliner relex: its entity threshold)
) -> Submitted:
    batch = TokenBatch(
        req_id=0,
        op=op,
        model_slot=slot,
        offsets=encoded.offsets,
        input_ids=encoded.input_ids,
        token_type_ids=encoded.token_type_ids,
        output_mask=mask_of(kinds),
        config_key=key,
        aux=encoded.aux,
        is_query=is_query,
        temperature=temperature,
    )
    results = await state.devices.submit(batch)
    note_work(batch.n_items, encoded.n_tokens, tokenization_ms, results.queue_ms, results.inference_ms)
    return Submitted(results, encoded.n_tokens, tokenization_ms)
