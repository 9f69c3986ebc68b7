"""Cross-encoders: one sequence-classification forward per (query, document) pair, raw logits out.

The same forward serves rerankers (`cross_encoder`) and NLI zero-shot classifiers
(`nli_zero_shot`): both are `AutoModelForSequenceClassification` models (BERT, RoBERTa/XLM-R,
ModernBERT, ...) fed text pairs. Activations, ranking and label reading happen in the frontend
(`sie.frontend.scoring`, `sie.frontend.zero_shot`), so the adapter returns the logits untouched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    load_model,
    release,
    rows_output,
    takes_token_types,
    tensor_bytes,
)
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class CrossEncoderAdapter(Adapter):
    kinds = frozenset({ResultKind.SCORES})

    def __init__(self, model: PreTrainedModel, *, name: str) -> None:
        self.name = name
        self.device = model.device
        self.dtype = model.dtype
        self.num_labels = int(model.config.num_labels or 1)
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self._model: PreTrainedModel | None = model
        self._takes_token_types = takes_token_types(model)
        # Encoder-decoder classifiers (BART-MNLI) would otherwise build a key/value cache per call.
        self._takes_use_cache = "use_cache" in inspect.signature(model.forward).parameters
        self._memory_bytes = tensor_bytes(model)
        self._head = classifier_head(model)
        self._encoder = BaseEncoder(model.base_model) if self._head is not None else None
        self.is_padding_free = self._encoder is not None and self._encoder.is_padding_free
        # Our packed forward keeps no state; a model's own code (remote code included) might.
        self.concurrent_forwards = self.is_padding_free

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> CrossEncoderAdapter:
        from transformers import AutoModelForSequenceClassification  # deferred: slow import

        model = load_model(AutoModelForSequenceClassification, config, weights_dir, device, profile)
        return cls(model, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if self.is_padding_free and self._encoder is not None and self._head is not None:
            hidden = self._encoder.hidden_states(inputs)
            with torch.inference_mode():
                logits = self._head(hidden)
        else:
            logits = self.forward_logits(inputs.input_ids, inputs.attention_mask, inputs.token_type_ids)
        return {ResultKind.SCORES: rows_output(ResultKind.SCORES, logits)}

    def forward_logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """Raw classifier logits [n, num_labels] (float32 once `rows_output` converts them)."""
        logits: torch.Tensor = self.model_output(input_ids, attention_mask, token_type_ids).logits
        return logits

    def model_output(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None,
        **extra: Any,
    ) -> Any:
        """The model's own padded forward; `extra` goes to it as is (`output_hidden_states`)."""
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        if token_type_ids is not None and self._takes_token_types:
            extra["token_type_ids"] = token_type_ids
        if self._takes_use_cache:
            extra["use_cache"] = False
        with torch.inference_mode():
            return self._model(input_ids=input_ids, attention_mask=attention_mask, **extra)

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._encoder = self._head = None
        release(self.device)


def classifier_head(model: Any) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The classifier on top of the base encoder's hidden states [n, L, hidden], for the
    architectures whose encoder runs padding-free; None for the others (their own forward runs)."""
    model_type = model.config.model_type
    if model_type == "bert" and getattr(model.bert, "pooler", None) is not None:
        return lambda hidden: model.classifier(model.dropout(model.bert.pooler(hidden)))
    if model_type in ("roberta", "xlm-roberta", "camembert"):
        return model.classifier  # reads the first token itself
    return None
