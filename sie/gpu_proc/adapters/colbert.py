"""ColBERT-style late-interaction encoders: a transformers encoder plus a linear projection per token.

The frontend decides everything about tokens (markers, query expansion, the skiplist) and sends
two bits per token in `aux`: bit 0 = the token's vector is part of the output, bit 1 = the encoder
attends to it. This adapter only runs the encoder with that attention mask, projects every hidden
state, and returns the kept rows, unnormalized (the frontend normalizes each token vector).

The projection is read from where PyLate / sentence-transformers save it (`modules.json` naming
`Dense` modules, each a folder with `config.json` and `model.safetensors` or `pytorch_model.bin`,
usually one `1_Dense`), or, for Stanford-NLP checkpoints, from the `linear.weight` tensor stored
beside the encoder's own weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    compute_dtype,
    from_pretrained,
    loading_options,
    place,
    release,
    tensor_bytes,
    token_rows_output,
)
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

KEEP, ATTEND = 1, 2  # the aux bits (see sie.frontend.colbert)
_IDENTITY_ACTIVATIONS = ("torch.nn.modules.linear.Identity", "torch.nn.Identity")


class ColbertAdapter(Adapter):
    kinds = frozenset({ResultKind.MULTIVECTOR})

    def __init__(self, model: PreTrainedModel, projection: torch.nn.Sequential, *, name: str) -> None:
        self.name = name
        self.device = model.device
        self.dtype = model.dtype
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self.dim = _out_features(projection)
        self._model: PreTrainedModel | None = model
        self._projection: torch.nn.Sequential | None = projection
        self._encoder: BaseEncoder | None = BaseEncoder(model)
        self.is_padding_free = self._encoder.is_padding_free
        self._memory_bytes = tensor_bytes(model, projection)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ColbertAdapter:
        from transformers import AutoModel  # deferred: importing transformers costs a second or more

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        model = from_pretrained(AutoModel, weights_dir, dtype, **loading_options(config, profile))
        projection = load_projection(weights_dir, int(model.config.hidden_size)).to(dtype)
        place(model, torch_device)
        place(projection, torch_device)
        return cls(model, projection, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if self._encoder is None or self._projection is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        attention, keep = token_masks(inputs.aux, inputs.attention_mask)
        # Every real token is computed (query expansion tokens too); `attention` says which are attended.
        hidden = self._encoder.hidden_states(inputs, key_mask=attention)
        with torch.inference_mode():
            vectors = self._projection(hidden)
        return {ResultKind.MULTIVECTOR: token_rows_output(ResultKind.MULTIVECTOR, vectors, keep)}

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._encoder = None
        self._projection = None
        release(self.device)


def token_masks(aux: torch.Tensor | None, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's attention mask and the rows to output, from the aux bits.

    An item sent without bits (all zero, also what the runner pads with when only some items of a
    batch have aux) attends to and keeps every real token.
    """
    if aux is None:
        return attention_mask, attention_mask
    has_bits = (aux != 0).any(dim=1, keepdim=True)
    attention = torch.where(has_bits, (aux >> 1) & 1, attention_mask)
    return attention, torch.where(has_bits, aux & KEEP, attention_mask)


def load_projection(weights_dir: Path, hidden_size: int) -> torch.nn.Sequential:
    """The token projection as a chain of linear layers, from whichever layout the folder uses."""
    folders = _dense_folders(weights_dir)
    if folders:
        layers = [_dense_layer(folder) for folder in folders]
    else:
        weight = _stanford_linear(weights_dir)
        layers = [torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)]
        layers[0].weight.data.copy_(weight)
    if layers[0].in_features != hidden_size:
        raise ValueError(
            f"{weights_dir}: projection expects {layers[0].in_features} features, encoder has {hidden_size}"
        )
    return torch.nn.Sequential(*layers)


def _out_features(projection: torch.nn.Sequential) -> int:
    last = projection[-1]
    assert isinstance(last, torch.nn.Linear)
    return int(last.out_features)


def _dense_folders(weights_dir: Path) -> list[Path]:
    """The Dense modules in `modules.json` order; without that file, `1_Dense` if present."""
    modules_file = weights_dir / "modules.json"
    if modules_file.is_file():
        modules = sorted(json.loads(modules_file.read_text()), key=lambda m: int(m.get("idx", 0)))
        return [weights_dir / m["path"] for m in modules if str(m.get("type", "")).endswith("Dense")]
    fallback = weights_dir / "1_Dense"
    return [fallback] if fallback.is_dir() else []


def _dense_layer(folder: Path) -> torch.nn.Linear:
    settings: dict[str, Any] = json.loads((folder / "config.json").read_text())
    activation = settings.get("activation_function", _IDENTITY_ACTIVATIONS[0])
    if activation not in _IDENTITY_ACTIVATIONS or settings.get("use_residual"):
        raise ValueError(f"{folder}: only linear Dense layers are supported (activation {activation})")
    state = _read_tensors(folder)
    weight = state["linear.weight"]
    bias = state.get("linear.bias")
    layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    layer.weight.data.copy_(weight)
    if bias is not None and layer.bias is not None:
        layer.bias.data.copy_(bias)
    return layer


def _stanford_linear(weights_dir: Path) -> torch.Tensor:
    state = _read_tensors(weights_dir, only="linear.weight")
    if "linear.weight" not in state:
        raise ValueError(
            f"{weights_dir}: no ColBERT projection (no Dense module in modules.json, no 1_Dense folder, "
            "no linear.weight tensor in the model weights)"
        )
    return state["linear.weight"]


def _read_tensors(folder: Path, only: str | None = None) -> dict[str, torch.Tensor]:
    """Tensors of `model.safetensors`, else `pytorch_model.bin` (weights only, never pickled code)."""
    safetensors_file = folder / "model.safetensors"
    if safetensors_file.is_file():
        from safetensors import safe_open

        with safe_open(str(safetensors_file), framework="pt") as fh:
            names = [name for name in fh.keys() if only is None or name == only]  # noqa: SIM118
            return {name: fh.get_tensor(name) for name in names}
    bin_file = folder / "pytorch_model.bin"
    if not bin_file.is_file():
        raise ValueError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    state: dict[str, torch.Tensor] = torch.load(bin_file, map_location="cpu", weights_only=True)
    return {name: t for name, t in state.items() if only is None or name == only}
