"""What the ColQwen2.5 and ColSmol adapters share: loading colpali-engine's checkpoints, and the page
forward's frame.

colpali-engine publishes these models as a PEFT LoRA adapter (adapter_config.json and
adapter_model.safetensors) whose `base_model_name_or_path` is a full checkpoint: the backbone under
colpali-engine's module names, and the projection to the token vectors (`custom_text_proj`,
`linear`). The backbone loads into transformers' own class under a key mapping, the projection is
read beside it, then each LoRA pair is added into the weight it adapts, W + (alpha / r) B A: PEFT's
merge_and_unload, done once at load, so the forward is the plain model's. A folder without
adapter_config.json is such a full checkpoint itself.

The forward: pages bring hundreds of tokens each while the batcher counts one, so a page batch runs
in parts within the profile's token budget; each part's last hidden states are projected and made
unit length (padding rows are dropped by `token_rows_output`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.companions import lora_base
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, from_pretrained, tensor_bytes, token_rows_output
from sie.gpu_proc.outputs import Output
from sie.model_config import ModelConfigError
from sie.model_location import hf_snapshot
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KeyMapping = Mapping[str, str]  # regex -> replacement, the first that matches (transformers' key_mapping)
# PEFT's saved names: a LoRA pair per adapted Linear, or a whole tensor (`modules_to_save`).
_LORA_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<half>[AB])(?:\.default)?\.weight$")
_SAVED_KEY = re.compile(
    r"^base_model\.model\.(?P<module>.+?)(?:\.modules_to_save(?:\.default)?)?\.(?P<param>weight|bias)$"
)


def base_folder(weights_dir: Path) -> Path:
    """The full checkpoint a LoRA folder adapts (a folder, else a Hub id in the local cache, at its
    default branch as SIE loads it; downloaded only with --hf-fallback); the folder itself without
    adapter_config.json."""
    base = lora_base(weights_dir)
    if base is None:
        return weights_dir
    return base if isinstance(base, Path) else hf_snapshot(base, None)


def rename(key: str, mapping: KeyMapping) -> str:
    for pattern, replacement in mapping.items():
        renamed, count = re.subn(pattern, replacement, key)
        if count:
            return renamed
    return key


def load_backbone(
    auto_class: Any, base: Path, mapping: KeyMapping, dtype: torch.dtype, **options: Any
) -> PreTrainedModel:
    """The backbone from colpali-engine's checkpoint; any of its weights missing there is an error
    (transformers would leave them random). `options` go to from_pretrained (a `config`)."""
    keys = dict(mapping)
    loaded: Any = from_pretrained(
        auto_class, base, dtype, key_mapping=keys, output_loading_info=True, **options
    )
    model, info = loaded  # with output_loading_info, (model, what was missing or unexpected)
    missing = sorted(info["missing_keys"])
    if missing:
        raise ModelConfigError(f"{base}: the checkpoint lacks {len(missing)} weights, e.g. {missing[:3]}")
    backbone: PreTrainedModel = model
    return backbone


def load_projection(base: Path, names: str | tuple[str, ...], dtype: torch.dtype) -> torch.nn.Linear:
    """The projection to token vectors from the checkpoint's files: the first of `names` (colpali-
    engine's custom_text_proj, another checkpoint's own name) that it holds."""
    from safetensors import safe_open

    names = (names,) if isinstance(names, str) else names
    pattern = "|".join(re.escape(name) for name in names)
    wanted = re.compile(rf"^(?:base_model\.model\.)?(?P<name>{pattern})\.(?P<param>weight|bias)$")
    found: dict[str, dict[str, torch.Tensor]] = {}
    for path in sorted(base.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118  # safe_open handles are not iterable
                match = wanted.match(key)
                if match:
                    found.setdefault(match["name"], {})[match["param"]] = handle.get_tensor(key)
    params = next((found[name] for name in names if "weight" in found.get(name, {})), None)
    if params is None:
        raise ModelConfigError(f"{base}: no {' or '.join(names)} weight (the projection to token vectors)")
    out_dim, in_dim = params["weight"].shape
    projection = torch.nn.Linear(in_dim, out_dim, bias="bias" in params)
    projection.load_state_dict(params)
    return projection.to(dtype).eval()


def load_page_model(
    auto_class: Any,
    model_type: str,
    weights_dir: Path,
    mapping: KeyMapping,
    projection_names: str | tuple[str, ...],
    dtype: torch.dtype,
    **options: Any,
) -> tuple[PreTrainedModel, torch.nn.Linear]:
    """The backbone and its projection (under one of `projection_names`) from the folder's
    checkpoint (or the base its LoRA names), the LoRA merged into both."""
    base = base_folder(weights_dir)
    model = load_backbone(auto_class, base, mapping, dtype, **options)
    if model.config.model_type != model_type:
        raise ModelConfigError(f"{base}: a {model.config.model_type} checkpoint, not {model_type}")
    projection = load_projection(base, projection_names, dtype)
    names = (projection_names,) if isinstance(projection_names, str) else projection_names
    if base != weights_dir:
        merge_lora(
            weights_dir,
            lambda name: projection if name in names else model.get_submodule(rename(name, mapping)),
        )
    return model, projection


def merge_lora(folder: Path, module_of: Callable[[str], torch.nn.Module]) -> int:
    """Add the folder's LoRA (PEFT's layout) into the modules `module_of` finds by their name in the
    adapter; the number of modules changed."""
    from safetensors.torch import load_file

    config = json.loads((folder / "adapter_config.json").read_text())
    scale = _lora_scale(folder, config)
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    whole: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(str(folder / "adapter_model.safetensors")).items():
        if lora := _LORA_KEY.match(key):
            pairs.setdefault(lora["module"], {})[lora["half"]] = tensor
        elif saved := _SAVED_KEY.match(key):
            whole.setdefault(saved["module"], {})[saved["param"]] = tensor
        else:
            raise ModelConfigError(f"{folder}: adapter tensor {key!r} is not in PEFT's LoRA layout")
    with torch.no_grad():
        for name, pair in pairs.items():
            _add_pair(folder, name, module_of(name), pair, scale)
        for name, params in whole.items():
            module = module_of(name)
            for param, tensor in params.items():
                getattr(module, param).copy_(tensor)
    return len(pairs) + len(whole)


def _lora_scale(folder: Path, config: dict[str, Any]) -> float:
    unsupported = {
        "peft_type": config.get("peft_type", "LORA") != "LORA",
        "use_dora": bool(config.get("use_dora")),
        "rank_pattern": bool(config.get("rank_pattern")),
        "alpha_pattern": bool(config.get("alpha_pattern")),
        "fan_in_fan_out": bool(config.get("fan_in_fan_out")),
        "bias": config.get("bias", "none") != "none",
    }
    refused = [key for key, is_set in unsupported.items() if is_set]
    if refused:
        raise ModelConfigError(f"{folder}: adapter settings not merged here: {', '.join(refused)}")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    return alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def _add_pair(
    folder: Path, name: str, module: torch.nn.Module, pair: dict[str, torch.Tensor], scale: float
) -> None:
    if not isinstance(module, torch.nn.Linear) or set(pair) != {"A", "B"}:
        raise ModelConfigError(f"{folder}: LoRA of {name!r} is not an A/B pair on a Linear layer")
    weight = module.weight
    delta = pair["B"].to(weight.device, torch.float32) @ pair["A"].to(weight.device, torch.float32)
    weight.copy_((weight.float() + scale * delta).to(weight.dtype))


class PageModel(HeldModel):
    """A colpali-engine model held for the device: the backbone (`_hidden`, per family) and the
    projection; queries and pages in, unit token vectors out."""

    kinds = frozenset({ResultKind.MULTIVECTOR})

    def __init__(
        self,
        model: PreTrainedModel,
        projection: torch.nn.Linear,
        normalizer: PixelNormalizer,
        *,
        name: str,
        max_batch_tokens: int,
    ) -> None:
        super().__init__(model, name=name)
        text_config = model.config.get_text_config()
        self.pad_token_id = int(getattr(text_config, "pad_token_id", None) or 0)
        self._normalizer = normalizer  # the processor's rescale and normalization of page pixels
        self._projection = projection.to(self.device)
        self._memory_bytes += tensor_bytes(projection)
        self._max_batch_tokens = max_batch_tokens

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        n, length = inputs.input_ids.shape
        rows = n if inputs.pixels is None else max(1, self._max_batch_tokens // max(1, length))
        with torch.inference_mode():
            parts = [self._vectors(inputs, start, min(n, start + rows)) for start in range(0, n, rows)]
        vectors = torch.cat(parts) if len(parts) > 1 else parts[0]
        return {
            ResultKind.MULTIVECTOR: token_rows_output(ResultKind.MULTIVECTOR, vectors, inputs.attention_mask)
        }

    def _vectors(self, inputs: ForwardInputs, start: int, stop: int) -> torch.Tensor:
        """[stop - start, L, dim] unit token vectors of items start..stop (padding rows: garbage)."""
        projected = self._projection(self._hidden(inputs, start, stop))
        return projected / projected.norm(dim=-1, keepdim=True)

    def _hidden(self, inputs: ForwardInputs, start: int, stop: int) -> torch.Tensor:
        """The backbone's last hidden states [stop - start, L, hidden] of items start..stop."""
        raise NotImplementedError
