"""Dense bi-encoders of the BERT family (BERT, RoBERTa/XLM-R, MPNet, ModernBERT, ...).

Everything transformers' `AutoModel` loads as an encoder returning `last_hidden_state` fits here;
the profile only chooses pooling and precision. Weights come from a local folder, never the hub.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    load_model,
    release,
    rows_output,
    tensor_bytes,
)
from sie.gpu_proc.adapters.pooling import Pooling, pool
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class DenseAdapter:
    kinds = frozenset({ResultKind.DENSE})

    def __init__(self, model: PreTrainedModel, *, name: str, pooling: Pooling) -> None:
        self.name = name
        self.pooling: Pooling = pooling
        self.device = model.device
        self.dtype = model.dtype
        self.dim = int(model.config.hidden_size)
        self.pad_token_id = int(model.config.pad_token_id or 0)
        self._model: PreTrainedModel | None = model
        self._encoder: BaseEncoder | None = BaseEncoder(model)
        self.is_padding_free = self._encoder.is_padding_free
        self._memory_bytes = tensor_bytes(model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> DenseAdapter:
        from transformers import AutoModel  # deferred: importing transformers costs a second or more

        model = load_model(AutoModel, config, weights_dir, device, profile)
        pooling = config.profile(profile).adapter_options.runtime.pooling
        return cls(model, name=config.sie_id, pooling=pooling)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        """Pooled float32 [n, dim], not normalized (the frontend normalizes)."""
        if self._encoder is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        hidden = self._encoder.hidden_states(inputs)
        with torch.inference_mode():
            pooled = pool(hidden, inputs.attention_mask, self.pooling)
        return {ResultKind.DENSE: rows_output(ResultKind.DENSE, pooled)}

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def close(self) -> None:
        self._model = None
        self._encoder = None  # it holds the encoder's modules too
        release(self.device)
