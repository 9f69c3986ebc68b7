"""SIE's fake model (`sie-fake`): outputs hashed from the token ids, no weights, no forward.

It exercises everything around a model (load, batch, schedule, evict, deliver) at the cost of a
hash (see `fake_hash`), so it measures the serving stack's own ceiling. It holds its declared
`memory_footprint_bytes` as real device memory, so the memory manager sees it as it sees weights,
and its `faults` (see `fake_faults`) inject slow loads and out-of-memory forwards.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters import fake_hash
from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.fake_faults import FaultRuntime, resolve_faults
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

DEFAULT_DENSE_DIM = 384
DEFAULT_FOOTPRINT_BYTES = 64 << 20  # SIE's default when the profile declares none


class FakeAdapter(Adapter):
    pad_token_id = 0
    is_padding_free = True  # the hash ignores padding: one call per batch

    def __init__(
        self,
        *,
        name: str,
        device: torch.device,
        dims: dict[ResultKind, int],
        faults: FaultRuntime,
        footprint_bytes: int,
        latency_s: float = 0.0,
    ) -> None:
        self.name = name
        self.device = device
        self.kinds = frozenset({ResultKind.SCORES, *dims})
        self._dims = dims
        self._faults = faults
        self._latency_s = latency_s
        self._footprint_bytes = footprint_bytes
        # Filled, so the pages are resident: an untouched allocation would not show in the RSS.
        self._held: torch.Tensor | None = torch.ones(footprint_bytes, dtype=torch.uint8, device=device)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> FakeAdapter:
        loadtime: dict[str, Any] = config.profile(profile).adapter_options.loadtime
        faults = FaultRuntime(
            resolve_faults(loadtime.get("faults"), loadtime.get("fault_key")), torch.device(device)
        )
        faults.on_load()
        encode = config.tasks.encode
        dims: dict[ResultKind, int] = {}
        if encode is None or encode.dense is not None:
            dims[ResultKind.DENSE] = encode.dense.dim if encode and encode.dense else DEFAULT_DENSE_DIM
        if encode is not None and encode.sparse is not None and encode.sparse.dim:
            dims[ResultKind.SPARSE] = encode.sparse.dim
        if encode is not None and encode.multivector is not None:
            dims[ResultKind.MULTIVECTOR] = encode.multivector.dim
        return cls(
            name=config.sie_id,
            device=torch.device(device),
            dims=dims,
            faults=faults,
            footprint_bytes=int(loadtime.get("memory_footprint_bytes", DEFAULT_FOOTPRINT_BYTES)),
            latency_s=float(loadtime.get("request_latency_s", 0.0)),
        )

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if self._held is None:
            raise RuntimeError(f"model '{self.name}' is closed")
        lengths = np.asarray(inputs.lengths, np.int64)
        self._faults.on_forward(int(lengths.sum()))
        if self._latency_s > 0:
            time.sleep(self._latency_s)
        ids = inputs.input_ids.cpu().numpy()
        types = None if inputs.token_type_ids is None else inputs.token_type_ids.cpu().numpy()
        keys = fake_hash.item_keys(ids, types, lengths)
        outputs: dict[ResultKind, Output] = {}
        if ResultKind.DENSE in wanted:
            outputs[ResultKind.DENSE] = Output(
                ResultKind.DENSE, fake_hash.dense(keys, self._dims[ResultKind.DENSE])
            )
        if ResultKind.SCORES in wanted:
            outputs[ResultKind.SCORES] = Output(ResultKind.SCORES, fake_hash.scores(keys))
        if ResultKind.SPARSE in wanted:
            values, indices, offsets = fake_hash.sparse(keys, self._dims[ResultKind.SPARSE])
            outputs[ResultKind.SPARSE] = Output(ResultKind.SPARSE, values, offsets, indices)
        if ResultKind.MULTIVECTOR in wanted:
            rows = np.maximum(fake_hash.word_counts(ids, lengths), 1)
            vectors, offsets = fake_hash.multivector(keys, rows, self._dims[ResultKind.MULTIVECTOR])
            outputs[ResultKind.MULTIVECTOR] = Output(ResultKind.MULTIVECTOR, vectors, offsets)
        return outputs

    def memory_bytes(self) -> int:
        return self._footprint_bytes

    def close(self) -> None:
        self._faults.on_unload()
        self._held = None
