"""What the runner needs from a model family, and the one place a family is chosen by name.

An adapter is small: load weights, run a forward pass on one padded run of a batch, and return
result arrays (`Output`s, one per result kind it was asked for). Everything that is not the
forward (tokenization, prompts, activations, ranking, span text, MUVERA, quantization) lives in the
frontend.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    import torch

    from sie.model_config import ModelConfig


@dataclass(frozen=True, slots=True)
class ForwardInputs:
    """One right-padded run of a batch, already on the adapter's device."""

    input_ids: torch.Tensor  # int64 [n, L], padded with the adapter's pad_token_id
    attention_mask: torch.Tensor  # int64 [n, L], 1 on real tokens
    token_type_ids: torch.Tensor | None  # int64 [n, L], or None when every type is 0
    aux: torch.Tensor | None  # int64 [n, L], 0 on padding (see sie.shm.layout: HAS_AUX)
    lengths: list[int]  # real tokens per item
    is_query: bool  # the request said options.is_query (ColBERT expands queries)
    # Media batches (built by sie.gpu_proc.media): one image or audio window per item.
    pixels: torch.Tensor | None = None  # uint8 or float32 [n, H, W, 3] as the frontend resized them
    samples: list[torch.Tensor] | None = None  # float32 mono windows at the model's rate, on the host
    temperature: float = 0.0  # sampling temperature of a generation (0: greedy)


class Adapter(Protocol):
    name: str
    device: torch.device
    pad_token_id: int  # what the runner pads input_ids with (RoBERTa derives positions from it)
    kinds: frozenset[ResultKind]  # the result kinds `forward` can produce
    # Optional (read with getattr, default False): the forward spends no compute on padding, so the
    # runner hands it the whole batch instead of length runs.
    # is_padding_free: bool

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        """Each wanted kind's output for the run's items (row i = item i), computed in one pass."""
        ...

    def memory_bytes(self) -> int:
        """Bytes of parameters and buffers on the device."""
        ...

    def close(self) -> None:
        """Drop the weights; the adapter is unusable afterwards."""
        ...


AdapterLoader = Callable[["ModelConfig", Path, str, "str | None"], Adapter]

# Family name (the profile's `adapter:`) -> "module:Class"; a family's module is imported only
# when a model of that family loads, so a server of dense models never imports onnxruntime.
FAMILIES: dict[str, str] = {
    "dense": "sie.gpu_proc.adapters.dense:DenseAdapter",
    "splade": "sie.gpu_proc.adapters.splade:SpladeAdapter",
    "colbert": "sie.gpu_proc.adapters.colbert:ColbertAdapter",
    "hybrid": "sie.gpu_proc.adapters.hybrid:HybridAdapter",
    "cross_encoder": "sie.gpu_proc.adapters.cross_encoder:CrossEncoderAdapter",
    # An NLI zero-shot classifier runs the same forward as a cross-encoder (logits per text pair);
    # only the frontend's prompts and the reading of the logits differ.
    "nli_zero_shot": "sie.gpu_proc.adapters.cross_encoder:CrossEncoderAdapter",
    "token_classification": "sie.gpu_proc.adapters.token_classification:TokenClassificationAdapter",
    "gliner": "sie.gpu_proc.adapters.gliner:GlinerAdapter",
    "clip": "sie.gpu_proc.adapters.clip:ClipAdapter",
    "owlv2": "sie.gpu_proc.adapters.owlv2:Owlv2Adapter",
    "whisper": "sie.gpu_proc.adapters.whisper:WhisperAdapter",
}


def load_adapter(config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None) -> Adapter:
    """Build the adapter named by the profile's `adapter` field, weights on `device`."""
    family = config.profile(profile).adapter
    target = FAMILIES.get(family)
    if target is None:
        known = ", ".join(sorted(FAMILIES))
        raise ValueError(f"model '{config.sie_id}': unknown adapter family {family!r} (known: {known})")
    module_name, class_name = target.split(":")
    loader: AdapterLoader = getattr(importlib.import_module(module_name), class_name).load
    return loader(config, weights_dir, device, profile)
