"""Dense bi-encoders of the BERT family (BERT, RoBERTa/XLM-R, MPNet, ModernBERT, ...).

Everything transformers' `AutoModel` loads as an encoder returning `last_hidden_state` fits here;
the profile only chooses pooling and precision. Weights come from a local folder, never the hub.
"""

from __future__ import annotations

import gc
import inspect
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.pooling import Pooling, pool

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class DenseAdapter:
    def __init__(self, model: PreTrainedModel, *, name: str, pooling: Pooling) -> None:
        self.name = name
        self.pooling: Pooling = pooling
        self.device = model.device
        self.dtype = model.dtype
        self.dim = int(model.config.hidden_size)
        self.pad_token_id = int(model.config.pad_token_id or 0)
        self._model: PreTrainedModel | None = model
        self._takes_token_types = _takes_token_types(model)
        self._memory_bytes = _tensor_bytes(model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> DenseAdapter:
        chosen = config.profile(profile)
        torch_device = torch.device(device)
        dtype = _compute_dtype(torch_device, chosen.compute_precision)
        model = _from_pretrained(weights_dir, dtype)
        _place(model, torch_device)
        return cls(model, name=config.sie_id, pooling=chosen.adapter_options.runtime.pooling)

    def forward_dense(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        extra = {}
        if token_type_ids is not None and self._takes_token_types:
            extra["token_type_ids"] = token_type_ids
        with torch.inference_mode():
            output = self._model(input_ids=input_ids, attention_mask=attention_mask, **extra)
            return pool(output.last_hidden_state, attention_mask, self.pooling)

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def close(self) -> None:
        self._model = None
        gc.collect()  # free the weights now, not at the next collection, so the memory is reusable
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _compute_dtype(device: torch.device, precision: str | None) -> torch.dtype:
    # float16/bfloat16 matmuls on CPU are slower than float32 (or missing), so CPU ignores the profile.
    if device.type == "cpu":
        return torch.float32
    return _DTYPES[precision or "float16"]


def _from_pretrained(weights_dir: Path, dtype: torch.dtype) -> PreTrainedModel:
    from transformers import AutoModel  # deferred: importing transformers costs a second or more

    model: PreTrainedModel
    try:
        model = AutoModel.from_pretrained(
            weights_dir, local_files_only=True, dtype=dtype, attn_implementation="sdpa"
        )
    except (ValueError, ImportError) as exc:
        # Some architectures (MPNet) have no SDPA path; their default attention is still correct.
        logger.info("no sdpa attention for %s, using the default: %s", weights_dir, exc)
        model = AutoModel.from_pretrained(weights_dir, local_files_only=True, dtype=dtype)
    return model


def _place(model: torch.nn.Module, device: torch.device) -> None:
    # Typed as a Module: transformers' decorated `to` confuses type checkers; the call is the same.
    model.to(device)
    model.eval()


def _takes_token_types(model: PreTrainedModel) -> bool:
    # RoBERTa-style models have one token type; a non-zero type would index past their table.
    accepts = "token_type_ids" in inspect.signature(model.forward).parameters
    return accepts and int(getattr(model.config, "type_vocab_size", 0) or 0) > 1


def _tensor_bytes(model: torch.nn.Module) -> int:
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)
