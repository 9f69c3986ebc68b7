"""Dense bi-encoders: BERT-family encoders (BERT, RoBERTa/XLM-R, MPNet, ModernBERT, ...) and decoder
embedders (Qwen3-Embedding, e5-mistral, ...: causal, last-token pooling; GritLM: bidirectional,
mean pooling, the profile's `loadtime.bidirectional`).

Everything transformers' `AutoModel` loads as a model returning `last_hidden_state` fits here;
the profile chooses pooling and precision, and a sentence-transformers folder's Dense modules run
after pooling (sie.gpu_proc.adapters.st_modules). Weights come from a local folder, never the hub.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    load_model,
    make_bidirectional,
    place,
    release,
    rows_output,
    tensor_bytes,
)
from sie.gpu_proc.adapters.pooling import Pooling, pool
from sie.gpu_proc.adapters.st_modules import load_head, out_features
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class DenseAdapter(Adapter):
    kinds = frozenset({ResultKind.DENSE})

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        name: str,
        pooling: Pooling,
        head: torch.nn.Sequential | None = None,
        bidirectional: bool = False,
    ) -> None:
        self.name = name
        self.pooling: Pooling = pooling
        self.device = model.device
        self.dtype = model.dtype
        self.dim = int(model.config.hidden_size) if head is None else out_features(head)
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self._model: PreTrainedModel | None = model
        self._head = head  # the Dense modules after pooling, in the model's dtype and device
        self._encoder: BaseEncoder | None = BaseEncoder(model, bidirectional=bidirectional)
        self.is_padding_free = self._encoder.is_padding_free
        # Our packed forward keeps no state; a model's own code (remote code included) might.
        self.concurrent_forwards = self.is_padding_free
        self._memory_bytes = tensor_bytes(model) + (0 if head is None else tensor_bytes(head))

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> DenseAdapter:
        from transformers import AutoModel  # deferred: importing transformers costs a second or more

        model = load_model(AutoModel, config, weights_dir, device, profile)
        # A decoder would fill a KV cache every forward that no later call reads.
        model.config.use_cache = False
        options = config.profile(profile).adapter_options
        bidirectional = options.loadtime.get("bidirectional") is True
        if bidirectional:  # GritLM: a Mistral decoder attending both ways
            make_bidirectional(model)
        hidden_size = int(model.config.hidden_size)
        head = load_head(weights_dir, hidden_size, options.loadtime.get("dense_projection_path"))
        if head is not None:
            head.to(dtype=model.dtype)
            place(head, model.device)
        return cls(
            model, name=config.sie_id, pooling=options.runtime.pooling, head=head, bidirectional=bidirectional
        )

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        """Pooled (and projected) float32 [n, dim], not normalized (the frontend normalizes)."""
        if self._encoder is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        hidden = self._encoder.hidden_states(inputs)
        with torch.inference_mode():
            pooled = pool(hidden, inputs.attention_mask, self.pooling)
            if self._head is not None:
                pooled = self._head(pooled.to(self.dtype)).float()
        return {ResultKind.DENSE: rows_output(ResultKind.DENSE, pooled)}

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._head = None
        self._encoder = None  # it holds the encoder's modules too
        release(self.device)
