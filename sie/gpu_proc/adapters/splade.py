"""SPLADE learned sparse encoders: a masked-LM head read as one weight per vocabulary term.

weight[term] = max over the item's tokens of log(1 + relu(logit[token, term])), or of
log(1 + log(1 + relu(...))) where the folder's sentence-transformers SpladePooling says `log1p_relu`
(OpenSearch's v3 encoders), or, for a folder without one, the YAML's loadtime `activation`. With
loadtime `zero_special_tokens: true` the tokens tokenizer.json marks special weigh 0. The result is
the item's non-zero terms, as (vocabulary index, weight) pairs in ascending index order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    load_model,
    release,
    takes_token_types,
    tensor_bytes,
)
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class SpladeAdapter(Adapter):
    kinds = frozenset({ResultKind.SPARSE})

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        name: str,
        is_log1p_relu: bool = False,
        zeroed_terms: list[int] | None = None,
    ) -> None:
        self.name = name
        self.is_log1p_relu = is_log1p_relu  # one more log1p on top of log1p(relu)
        # Vocabulary ids whose weight is always 0 (the special tokens, where the model's YAML asks).
        self._zeroed_terms = sorted(set(zeroed_terms or []))
        self.device = model.device
        self.dtype = model.dtype
        self.vocab_size = int(model.config.vocab_size)
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self._model: PreTrainedModel | None = model
        self._takes_token_types = takes_token_types(model)
        self._memory_bytes = tensor_bytes(model)
        # Padding-free when the masked LM is a BERT-style encoder plus a head: the encoder runs
        # packed and the vocabulary-wide head (most of SPLADE's compute) sees only real tokens.
        head = getattr(model, "cls", None) or getattr(model, "lm_head", None)
        self._encoder: BaseEncoder | None = BaseEncoder(model.base_model) if head is not None else None
        self._head = head
        self.is_padding_free = self._encoder is not None and self._encoder.is_padding_free
        # Our packed forward keeps no state; a model's own code (remote code included) might.
        self.concurrent_forwards = self.is_padding_free

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> SpladeAdapter:
        from transformers import AutoModelForMaskedLM  # deferred: importing transformers is slow

        loadtime = config.profile(profile).adapter_options.loadtime
        model = load_model(AutoModelForMaskedLM, config, weights_dir, device, profile)
        activation = pooling_activation(weights_dir, default=str(loadtime.get("activation") or "relu"))
        zeroed = special_token_ids(weights_dir) if loadtime.get("zero_special_tokens") else None
        return cls(model, name=config.sie_id, is_log1p_relu=activation == "log1p_relu", zeroed_terms=zeroed)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        # `inputs.is_query` is ignored on purpose: SPLADE-tiny (like SPLADE v2/v3 "ensembledistil")
        # encodes queries and documents with the same model and the same formula.
        if self.is_padding_free:
            weights = self._packed_term_weights(inputs)
        else:
            weights = self.term_weights(inputs.input_ids, inputs.attention_mask, inputs.token_type_ids)
        return {ResultKind.SPARSE: sparse_output(weights)}

    def _packed_term_weights(self, inputs: ForwardInputs) -> torch.Tensor:
        if self._encoder is None or self._head is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        hidden = self._encoder.hidden_states(inputs)
        with torch.inference_mode():
            real = inputs.attention_mask.bool()
            logits = self._head(hidden[real])  # [real tokens, vocab]
            item = torch.arange(len(real), device=real.device)[:, None].expand_as(real)[real]
            best = logits.new_full((len(real), logits.shape[1]), float("-inf"))
            best.scatter_reduce_(0, item[:, None].expand_as(logits), logits, "amax")
            return self._activate(best)

    def term_weights(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """[n, vocab] term weights, >= 0, on the device, in the model's dtype."""
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        extra = {}
        if token_type_ids is not None and self._takes_token_types:
            extra["token_type_ids"] = token_type_ids
        with torch.inference_mode():
            logits = self._model(input_ids=input_ids, attention_mask=attention_mask, **extra).logits
            # relu and log1p are monotone, so max(log1p(relu(x))) = log1p(relu(max(x))): taking
            # the max first runs them on [n, vocab] instead of [n, L, vocab]. The padding is
            # filled in place, since the logits are by far the largest tensor of the batch.
            padding = (attention_mask == 0).unsqueeze(-1)
            best = logits.masked_fill_(padding, float("-inf")).amax(dim=1)
            return self._activate(best)

    def _activate(self, best: torch.Tensor) -> torch.Tensor:
        """The per-term max logits, in place, to weights (monotone, so it commutes with the max)."""
        weights = best.relu_().log1p_()
        if self._zeroed_terms:
            weights[:, self._zeroed_terms] = 0
        return weights.log1p_() if self.is_log1p_relu else weights

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._encoder = None  # it holds the encoder's modules too
        self._head = None
        release(self.device)


def pooling_activation(folder: Path, default: str = "relu") -> str:
    """The activation of the folder's sentence-transformers SpladePooling module (`1_SpladePooling`,
    or `document_1_SpladePooling` in an inference-free model's Router); `default` when none says."""
    if default not in ("relu", "log1p_relu"):  # a YAML's option is checked whether or not it is used
        raise ValueError(f"activation {default!r} is not relu or log1p_relu")
    for path in sorted(folder.glob("*SpladePooling/config.json")):
        activation = json.loads(path.read_text(encoding="utf-8")).get("activation_function")
        if activation not in (None, "relu", "log1p_relu"):
            raise ValueError(f"{path}: SpladePooling activation {activation!r} is not relu or log1p_relu")
        return str(activation or "relu")
    return default


def special_token_ids(folder: Path) -> list[int]:
    """The ids of the tokens tokenizer.json marks special ([CLS], [SEP], [PAD], ...)."""
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    return sorted(int(token["id"]) for token in tokenizer.get("added_tokens") or [] if token.get("special"))


def sparse_output(weights: torch.Tensor) -> Output:
    """[n, vocab] weights -> ragged SPARSE Output of each row's non-zero terms, ascending index.

    One `nonzero` over the whole matrix on the device: it walks rows in order and columns in order
    within a row, so the pairs come out grouped by item with ascending indices, and only the pairs
    (not the n x vocab matrix) cross to the host.
    """
    rows, cols = weights.nonzero(as_tuple=True)
    values = weights[rows, cols].float().cpu().numpy()
    counts = torch.bincount(rows, minlength=weights.shape[0]).cpu().numpy()
    offsets = np.zeros(weights.shape[0] + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Output(ResultKind.SPARSE, values, offsets, cols.to(torch.int32).cpu().numpy())
