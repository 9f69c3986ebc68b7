"""Context pruners: a cross-encoder whose last hidden states also feed a per-token keep head.

One forward serves both tasks. A score batch gets the classifier's logits, as any cross-encoder's.
An extract batch also gets the keep head's raw logit for every real token of each (query, passage)
pair; the frontend activates them and turns the passage's into character spans.

The head (SIE's `PruningHead`) is Linear(hidden, intermediate), GELU, dropout, Linear(intermediate,
1), saved with `torch.save` as its trainer left it: the bare state dict, or one under
`pruning_head`, `state_dict` or `model_state_dict` (there with a `pruning_head.` prefix). It is read
with `weights_only=True`, which unpickles tensors and containers and nothing that runs code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.context_pruner import head_location
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import load_model, rows_output, tensor_bytes, token_rows_output
from sie.gpu_proc.adapters.cross_encoder import CrossEncoderAdapter
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

_HEAD_KEYS = ("classifier.0.weight", "classifier.0.bias", "classifier.3.weight", "classifier.3.bias")


class KeepHead(torch.nn.Module):
    """The pruning MLP at inference (its dropout is the identity): a keep logit per token."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(hidden_size, intermediate_size)
        self.out = torch.nn.Linear(intermediate_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.out(torch.nn.functional.gelu(self.up(hidden)))
        return logits


class ContextPrunerAdapter(CrossEncoderAdapter):
    kinds = frozenset({ResultKind.SCORES, ResultKind.TOKEN_SCORES})

    def __init__(self, model: PreTrainedModel, keep_head: KeepHead, *, name: str) -> None:
        super().__init__(model, name=name)
        self._keep_head: KeepHead | None = keep_head
        self._memory_bytes += tensor_bytes(keep_head)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ContextPrunerAdapter:
        from transformers import AutoModelForSequenceClassification  # deferred: slow import

        loadtime = config.profile(profile).adapter_options.loadtime
        head_file = head_location(config, profile).resolve(weights_dir)
        model = load_model(AutoModelForSequenceClassification, config, weights_dir, device, profile)
        head = load_keep_head(head_file, int(model.config.hidden_size), loadtime)
        head.to(device=model.device, dtype=model.dtype)
        return cls(model, head, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if ResultKind.TOKEN_SCORES not in wanted:
            return super().forward(inputs, wanted)
        if self._keep_head is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        hidden, logits = self._hidden_and_logits(inputs)
        with torch.inference_mode():
            keep = self._keep_head(hidden)
        return {
            ResultKind.SCORES: rows_output(ResultKind.SCORES, logits),
            ResultKind.TOKEN_SCORES: token_rows_output(ResultKind.TOKEN_SCORES, keep, inputs.attention_mask),
        }

    def _hidden_and_logits(self, inputs: ForwardInputs) -> tuple[torch.Tensor, torch.Tensor]:
        """The last hidden states [n, L, hidden] and the classifier's logits [n, num_labels]."""
        if self.is_padding_free and self._encoder is not None and self._head is not None:
            hidden = self._encoder.hidden_states(inputs)
            with torch.inference_mode():
                return hidden, self._head(hidden)
        output = self.model_output(
            inputs.input_ids, inputs.attention_mask, inputs.token_type_ids, output_hidden_states=True
        )
        return output.hidden_states[-1], output.logits

    def close(self) -> None:
        self._keep_head = None
        super().close()


def load_keep_head(path: Path, hidden_size: int, loadtime: dict[str, Any]) -> KeepHead:
    """The head from its torch file, checked against the encoder's width and the profile's sizes."""
    if not path.is_file():
        raise FileNotFoundError(f"the pruning head's weights {path} do not exist")
    saved = torch.load(path, map_location="cpu", weights_only=True)
    weights = _head_weights(saved)
    missing = [key for key in _HEAD_KEYS if key not in weights]
    if missing:
        raise ValueError(f"{path} holds no pruning head: {missing} missing (has {sorted(weights)[:8]})")
    intermediate, width = weights["classifier.0.weight"].shape
    if width != hidden_size:
        raise ValueError(f"{path}: the head reads {width} features, the encoder gives {hidden_size}")
    for key, found in (("hidden_size", width), ("intermediate_size", intermediate)):
        if key in loadtime and int(loadtime[key]) != found:
            raise ValueError(f"loadtime.{key} is {loadtime[key]}, the head in {path} has {found}")
    head = KeepHead(int(width), int(intermediate))
    head.load_state_dict(
        {
            "up.weight": weights["classifier.0.weight"],
            "up.bias": weights["classifier.0.bias"],
            "out.weight": weights["classifier.3.weight"],
            "out.bias": weights["classifier.3.bias"],
        }
    )
    return head.eval()


def _head_weights(saved: Any) -> dict[str, torch.Tensor]:
    """The head's own state dict out of what its trainer saved."""
    if not isinstance(saved, dict):
        raise ValueError(f"a pruning head file holds a state dict, not a {type(saved).__name__}")
    for key in ("pruning_head", "state_dict"):
        if isinstance(saved.get(key), dict):
            return dict(saved[key])
    if isinstance(saved.get("model_state_dict"), dict):
        full = saved["model_state_dict"]
        prefix = "pruning_head."
        own = {k[len(prefix) :]: v for k, v in full.items() if k.startswith(prefix)}
        return own or dict(full)
    return dict(saved)
