"""Run a request the way a device does: ring message -> batcher -> runner -> adapter.

The request is encoded and decoded with the ring layout, queued in a real Batcher and taken as
one batch, so a test of an adapter also covers the media sections and the batch grouping.
"""

from __future__ import annotations

import numpy as np
import torch

from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.batcher import Batcher
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.runner import Runner
from sie.shm.layout import ResultKind, TokenBatch, decode_request, encode_request


def device_run(adapter: Adapter, request: TokenBatch) -> dict[ResultKind, Output]:
    """Every output of one request, rows in the request's item order."""
    batcher = Batcher(max_batch_requests=10_000, max_pending_items=10_000, max_batch_tokens=lambda _: 10**9)
    assert batcher.try_add(decode_request(encode_request(request)), source=0, now=0.0)
    batch = batcher.next_batch(now=0.0, idle=True)
    assert batch is not None and len(batch.items) == request.n_items and len(batcher) == 0
    outputs = Runner(torch.device("cpu")).run(adapter, batch)
    order = np.argsort([item.item_index for item in batch.items]).tolist()
    return {kind: output.take(order) for kind, output in outputs.items()}
