"""The dense-embedding path every route shares: gate on model state, tokenize, submit, postprocess.

`/v1/encode` and `/v1/embeddings` differ only in how they parse and render; both call `embed`.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from dataclasses import dataclass

import numpy as np

from sie.errors import InputTooLong, InvalidInput, ModelLoadFailed, ModelLoading, ShuttingDown
from sie.frontend.postprocess import l2_normalize
from sie.frontend.state import FrontendState
from sie.shm.control import ModelState
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch

# Tokenizing a large request takes long enough to stall other connections; above this many
# items it runs on a worker thread (the Rust tokenizer releases the GIL).
INLINE_TOKENIZE_ITEMS = 16


@dataclass(frozen=True, slots=True)
class Embedded:
    values: np.ndarray  # float32 [n, dim], normalized when the model says so
    input_tokens: int
    tokenization_ms: float
    queue_ms: float
    inference_ms: float


def check_serving(state: FrontendState) -> None:
    if state.is_draining or state.devices.is_draining():
        raise ShuttingDown("Server is shutting down; retry on another instance")


def gate_model(state: FrontendState, slot: int, name: str) -> None:
    """Raise unless the model is loaded somewhere; the first request for it starts the load."""
    devices = state.devices
    model_state = devices.model_state(slot)
    if model_state == ModelState.LOADED:
        return
    if model_state == ModelState.FAILED:
        raise ModelLoadFailed(f"Model '{name}' failed to load: {devices.model_error(slot)}")
    if model_state == ModelState.AVAILABLE:
        devices.request_load(slot)
    raise ModelLoading(f"Model '{name}' is loading; retry shortly")


async def embed(
    state: FrontendState,
    name: str,
    texts: list[str],
    *,
    profile: str | None = None,
    normalize: bool | None = None,
) -> Embedded:
    slot, config = state.model(name)
    check_serving(state)
    limit = state.settings.max_concurrent_requests
    if len(texts) > limit:  # could never be admitted: no retry would help
        raise InputTooLong(f"Request has {len(texts)} items; at most {limit} can be queued for one model")
    if profile is not None and profile not in config.profiles:
        known = ", ".join(sorted(config.profiles)) or "default"
        raise InvalidInput(f"Unknown profile '{profile}' for model '{name}'. Available: {known}")
    gate_model(state, slot, name)
    tokenizer = state.tokenizers.get(config)
    started = time.perf_counter()
    if len(texts) > INLINE_TOKENIZE_ITEMS:
        encoded = await asyncio.to_thread(tokenizer.encode, texts)
    else:
        encoded = tokenizer.encode(texts)
    tokenization_ms = (time.perf_counter() - started) * 1000
    profile_name = profile or config.default_profile_name
    batch = TokenBatch(
        req_id=0,
        op=Op.ENCODE,
        model_slot=slot,
        offsets=encoded.offsets,
        input_ids=encoded.input_ids,
        token_type_ids=encoded.token_type_ids,
        output_mask=OutputMask.DENSE,
        config_key=zlib.crc32(profile_name.encode()),
    )
    result = await state.devices.submit(batch)
    should_normalize = config.profile(profile).adapter_options.runtime.normalize
    if normalize is not None:
        should_normalize = normalize
    dense = result.rows[ResultKind.DENSE]
    values = l2_normalize(dense) if should_normalize else dense
    return Embedded(values, encoded.n_tokens, tokenization_ms, result.queue_ms, result.inference_ms)
