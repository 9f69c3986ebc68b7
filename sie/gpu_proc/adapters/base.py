"""What the runner needs from a model family, and the one place a family is chosen by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sie.gpu_proc.adapters.dense import DenseAdapter

if TYPE_CHECKING:
    import torch

    from sie.model_config import ModelConfig


class Adapter(Protocol):
    name: str
    device: torch.device
    dtype: torch.dtype
    dim: int  # width of forward_dense's output
    pad_token_id: int  # what the runner pads input_ids with (RoBERTa derives positions from it)

    def forward_dense(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """Pooled float32 [n, dim], not normalized (the frontend normalizes)."""
        ...

    def memory_bytes(self) -> int:
        """Bytes of parameters and buffers on the device."""
        ...

    def close(self) -> None:
        """Drop the weights; the adapter is unusable afterwards."""
        ...


AdapterLoader = Callable[["ModelConfig", Path, str, "str | None"], Adapter]

FAMILIES: dict[str, AdapterLoader] = {
    "dense": DenseAdapter.load,
}


def load_adapter(config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None) -> Adapter:
    """Build the adapter named by the profile's `adapter` field, weights on `device`."""
    family = config.profile(profile).adapter
    loader = FAMILIES.get(family)
    if loader is None:
        known = ", ".join(sorted(FAMILIES))
        raise ValueError(f"model '{config.sie_id}': unknown adapter family {family!r} (known: {known})")
    return loader(config, weights_dir, device, profile)
