"""What the runner needs from a model family's device half, and how a model's adapter is built.

An adapter is small: load weights, run a forward pass on one padded run of a batch, and return
result arrays (`Output`s, one per result kind it was asked for). Everything that is not the
forward (tokenization, prompts, activations, ranking, span text, MUVERA, quantization) lives in the
frontend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sie.families import UnknownFamily, family_of
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
    # The batch's float parameter: a generation's temperature (Whisper), an entity threshold
    # (gliner relex); every item of a batch has the same.
    scalar: float = 0.0


class Adapter(Protocol):
    """Everything the runner, the thread choice and the registry ask of a family's device half.

    Adapters subclass it, so the defaults below hold unless a family says otherwise."""

    name: str
    device: torch.device
    pad_token_id: int  # what the runner pads input_ids with (RoBERTa derives positions from it)
    kinds: frozenset[ResultKind]  # the result kinds `forward` can produce
    # The forward spends no compute on padding, so the runner hands it the whole batch instead of
    # length runs.
    is_padding_free: bool = False
    # Two batches may run through the adapter at once on a CPU device (sie.gpu_proc.inference): its
    # forward keeps nothing between calls (no reused buffers, caches or counters).
    concurrent_forwards: bool = False
    # Multiply-adds of one image or audio window (sie.gpu_proc.threads picks the thread count from
    # it); None: not known, treated as heavy.
    media_flops_per_item: float | None = None

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        """Each wanted kind's output for the run's items (row i = item i), computed in one pass."""
        ...

    def memory_bytes(self) -> int:
        """Bytes of parameters and buffers on the device."""
        ...

    def close(self) -> None:
        """Drop the weights; the adapter is unusable afterwards."""
        ...

    def lora_target(self) -> torch.nn.Module | None:
        """The module LoRA adapters are injected into (sie.gpu_proc.lora); None: the family takes none."""
        return None


AdapterLoader = Callable[["ModelConfig", Path, str, "str | None"], Adapter]


def load_adapter(config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None) -> Adapter:
    """Build the adapter of the profile's family (sie.families), weights on `device`.

    The family's adapter module is imported only now, so a server of dense models never imports
    onnxruntime.
    """
    try:
        family = family_of(config.profile(profile).adapter)
    except UnknownFamily as exc:
        raise UnknownFamily(f"model '{config.sie_id}': {exc}") from None
    loader: AdapterLoader = family.adapter_class().load
    return loader(config, weights_dir, device, profile)
