"""The sentence-transformers modules a dense model applies after pooling: its Dense projections.

A sentence-transformers folder lists its modules in `modules.json`: the encoder first, then
`Pooling`, any number of `Dense` (each a folder with `config.json` {in_features, out_features, bias,
activation_function} and `model.safetensors` or `pytorch_model.bin` holding `linear.weight` /
`linear.bias`) and usually a final `Normalize`. The profile already decides pooling and the frontend
normalizes as the profile says, so what is built here is the head between the two: every Dense in
order, with a Normalize only where a Dense follows it. A profile's loadtime `dense_projection_path`
(a folder under the weights dir, as SIE names it) picks one Dense folder instead of modules.json's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

# Parameter-free activations that sentence-transformers saves by class path, e.g. "torch.nn.Tanh" or
# "torch.nn.modules.activation.Tanh"; anything else (custom code) is refused.
ACTIVATIONS: dict[str, type[torch.nn.Module]] = {
    "Identity": torch.nn.Identity,
    "Tanh": torch.nn.Tanh,
    "ReLU": torch.nn.ReLU,
    "GELU": torch.nn.GELU,
    "Sigmoid": torch.nn.Sigmoid,
    "SiLU": torch.nn.SiLU,
}
# sentence-transformers' Dense constructs Tanh when its config names no activation.
DEFAULT_ACTIVATION = "torch.nn.modules.activation.Tanh"
# Module types (last part of the saved class path) that leave the pooled vector as it is.
_PASS_THROUGH = frozenset({"Pooling", "Dropout"})
_VECTOR = "sentence_embedding"  # the feature a Dense reads and writes when it acts on pooled vectors


class DenseLayer(torch.nn.Module):
    """sentence-transformers' Dense: activation(linear(x)), plus x (or a projection of it) when residual."""

    def __init__(
        self, linear: torch.nn.Linear, activation: torch.nn.Module, residual: torch.nn.Module | None
    ) -> None:
        super().__init__()
        self.linear = linear
        self.activation = activation
        self.residual = residual

    @property
    def in_features(self) -> int:
        return int(self.linear.in_features)

    @property
    def out_features(self) -> int:
        return int(self.linear.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.activation(self.linear(x))
        return out if self.residual is None else out + self.residual(x)


class L2Normalize(torch.nn.Module):
    """A Normalize module that a later Dense reads, so it cannot be left to the frontend."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(x, p=2.0, dim=-1)


def load_head(
    weights_dir: Path, hidden_size: int, projection_path: str | None = None
) -> torch.nn.Sequential | None:
    """The modules to run on pooled [n, hidden_size] vectors, or None when they change nothing."""
    if projection_path:
        steps: list[torch.nn.Module] = [dense_layer(_inside(weights_dir, projection_path))]
    else:
        steps = _module_steps(weights_dir)
    while steps and isinstance(steps[-1], L2Normalize):
        steps.pop()  # the frontend normalizes last, as the profile says
    if not steps:
        return None
    width = hidden_size
    for step in steps:
        if isinstance(step, DenseLayer):
            if step.in_features != width:
                raise ValueError(
                    f"{weights_dir}: a Dense module expects {step.in_features} features, gets {width}"
                )
            width = step.out_features
    return torch.nn.Sequential(*steps)


def out_features(head: torch.nn.Sequential) -> int:
    """The width of the head's output: its last Dense's out_features."""
    dense = [step for step in head if isinstance(step, DenseLayer)]
    return dense[-1].out_features


def dense_layer(folder: Path) -> DenseLayer:
    """One Dense module folder as a layer (float32, on the CPU)."""
    settings: dict[str, Any] = json.loads((folder / "config.json").read_text())
    for key in ("module_input_name", "module_output_name"):
        if settings.get(key, _VECTOR) != _VECTOR:
            raise ValueError(
                f"{folder}: a Dense module on '{settings[key]}' (not pooled vectors) is not supported"
            )
    activation = activation_module(str(settings.get("activation_function") or DEFAULT_ACTIVATION), folder)
    state = read_tensors(folder)
    linear = torch.nn.Linear(
        int(settings["in_features"]), int(settings["out_features"]), bias=bool(settings.get("bias", True))
    )
    linear.load_state_dict(
        {name.removeprefix("linear."): t for name, t in state.items() if name.startswith("linear.")}
    )
    residual: torch.nn.Module | None = None
    if settings.get("use_residual"):
        residual = torch.nn.Identity()
        if linear.in_features != linear.out_features:
            residual = torch.nn.Linear(linear.in_features, linear.out_features, bias=False)
            residual.load_state_dict({"weight": state["residual.weight"]})
    return DenseLayer(linear, activation, residual)


def activation_module(path: str, folder: Path) -> torch.nn.Module:
    """The torch module of a saved activation class path, refusing any outside ACTIVATIONS."""
    prefix, _, name = path.rpartition(".")
    in_torch = prefix == "torch.nn" or prefix.startswith("torch.nn.modules.")
    if not in_torch or name not in ACTIVATIONS:
        known = ", ".join(ACTIVATIONS)
        raise ValueError(f"{folder}: unsupported Dense activation '{path}' (supported: torch.nn {known})")
    return ACTIVATIONS[name]()


def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """Tensors of `model.safetensors`, else `pytorch_model.bin` (weights only, never pickled code)."""
    safetensors_file = folder / "model.safetensors"
    if safetensors_file.is_file():
        from safetensors.torch import load_file

        return load_file(str(safetensors_file))
    bin_file = folder / "pytorch_model.bin"
    if not bin_file.is_file():
        raise ValueError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    state: dict[str, torch.Tensor] = torch.load(bin_file, map_location="cpu", weights_only=True)
    return state


def _module_steps(weights_dir: Path) -> list[torch.nn.Module]:
    """modules.json's modules after the encoder as layers; none without the file."""
    modules_file = weights_dir / "modules.json"
    if not modules_file.is_file():
        return []
    modules = sorted(json.loads(modules_file.read_text()), key=lambda m: int(m.get("idx", 0)))
    steps: list[torch.nn.Module] = []
    for module in modules[1:]:  # the first is the encoder, whatever its class
        kind = str(module.get("type", "")).rpartition(".")[2]
        if kind == "Dense":
            steps.append(dense_layer(_inside(weights_dir, str(module["path"]))))
        elif kind == "Normalize":
            steps.append(L2Normalize())
        elif kind not in _PASS_THROUGH:
            raise ValueError(f"{modules_file}: module type '{module.get('type')}' is not supported")
    return steps


def _inside(weights_dir: Path, relative: str) -> Path:
    # A folder named by a YAML or modules.json must not reach outside the model's own files.
    path = Path(relative)
    folder = weights_dir / path
    if path.is_absolute() or ".." in path.parts or not folder.is_dir():
        raise ValueError(f"{weights_dir}: no module folder '{relative}' inside the weights folder")
    return folder
