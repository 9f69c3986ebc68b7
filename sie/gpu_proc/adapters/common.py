"""Helpers every torch adapter shares: precision, loading from a local folder, placement, sizes,
and turning result tensors into `Output`s."""

from __future__ import annotations

import gc
import inspect
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc import attention
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.adapters.gte_new import NativeGte, apply_ntk, native_gte
from sie.gpu_proc.adapters.packed import PackedEncoder
from sie.gpu_proc.adapters.packed_decoder import PackedDecoder
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.gpu_proc.adapters.base import ForwardInputs
    from sie.model_config import ModelConfig

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def compute_dtype(device: torch.device, precision: str | None) -> torch.dtype:
    # float16 matmuls on CPU are slow or missing, so CPU runs float32 unless bfloat16 is asked for
    # (a profile's compute_precision, or SIE_DEFAULT_COMPUTE_PRECISION), which CPUs do support.
    if device.type == "cpu":
        return torch.bfloat16 if precision == "bfloat16" else torch.float32
    return _DTYPES[precision or "float16"]


def from_pretrained(auto_class: Any, weights_dir: Path, dtype: torch.dtype, **kwargs: Any) -> PreTrainedModel:
    """`auto_class.from_pretrained` from a local folder with the configured attention backend
    (SIE_ATTENTION_BACKEND, sie.gpu_proc.attention), or the next one down where the model lacks it.

    A GTE folder of `model_type: new` loads into transformers' own GTE classes where they compute
    what it describes (sie.gpu_proc.adapters.gte_new), so its code is neither needed nor run."""
    native = native_gte(auto_class, weights_dir)
    if native is not None:
        model = _from_pretrained(native.model_class, weights_dir, dtype, **_native_options(native, kwargs))
        apply_ntk(model, native)
        return model
    refuse_unrequested_model_code(auto_class, weights_dir, bool(kwargs.get("trust_remote_code")))
    if kwargs.get("code_revision"):
        fetch_code_repositories(weights_dir, str(kwargs["code_revision"]))
    return _from_pretrained(auto_class, weights_dir, dtype, **kwargs)


def _native_options(native: NativeGte, options: dict[str, Any]) -> dict[str, Any]:
    """from_pretrained's options for a native class: the YAML's config overrides applied to its
    config, the remote-code options dropped (no code runs)."""
    remote = ("trust_remote_code", "code_revision")
    for name, value in options.items():
        if name not in remote:
            setattr(native.config, name, value)
    return {"config": native.config}


def _from_pretrained(
    model_class: Any, weights_dir: Path, dtype: torch.dtype, **kwargs: Any
) -> PreTrainedModel:
    model: PreTrainedModel
    for implementation in attention.candidates(dtype, torch.cuda.is_available())[:-1]:
        try:
            model = model_class.from_pretrained(
                weights_dir, local_files_only=True, dtype=dtype, attn_implementation=implementation, **kwargs
            )
            return model
        except (ValueError, ImportError) as exc:
            # Some architectures (MPNet) have no SDPA path; their default attention is still correct.
            logger.info("no %s attention for %s: %s", implementation, weights_dir, exc)
    model = model_class.from_pretrained(weights_dir, local_files_only=True, dtype=dtype, **kwargs)
    return model


def refuse_unrequested_model_code(auto_class: Any, weights_dir: Path, trusted: bool) -> None:
    """A folder whose config.json maps this auto class to its own code (`auto_map`) computes with that
    code; loading a native class of the same `model_type` instead would give wrong outputs silently."""
    if trusted:
        return
    try:
        auto_map = json.loads((weights_dir / "config.json").read_text()).get("auto_map") or {}
    except (OSError, ValueError):
        return  # transformers reports a missing or broken config.json itself
    name = getattr(auto_class, "__name__", "")
    if isinstance(auto_map, dict) and name in auto_map:
        raise ModelCodeRequired(
            f"{weights_dir} ships its own code for {name} ({auto_map[name]}); set "
            "`trust_remote_code: true` in the model's YAML loadtime options to run it"
        )


def fetch_code_repositories(weights_dir: Path, revision: str) -> None:
    """The repositories a folder's `auto_map` takes code from (`org/code--module.Class`), at the
    pinned revision, in the local Hugging Face cache: found there, or downloaded with --hf-fallback,
    or a ModelConfigError that says how to put them there."""
    from sie.companions import code_repositories
    from sie.model_location import hf_snapshot

    for repo in sorted(code_repositories(weights_dir, revision)):
        hf_snapshot(repo, revision)


class ModelCodeRequired(RuntimeError):
    """The weights need the model folder's own code, which the YAML has not allowed."""


def place(module: torch.nn.Module, device: torch.device) -> None:
    # Typed as a Module: transformers' decorated `to` confuses type checkers; the call is the same.
    module.to(device)
    module.eval()


def tensor_bytes(*modules: torch.nn.Module) -> int:
    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    return sum(t.numel() * t.element_size() for t in tensors)


def release(device: torch.device) -> None:
    """Free dropped weights now, so the memory is reusable.

    Reference counting frees a dropped model's tensors; a young-generation collection catches the
    cycles the last batches made. A full collection would hold the GIL for ~0.4 s on a device
    process (measured with transformers loaded, finding nothing to free): the loop and the forward
    of every other model would stall at each eviction.
    """
    gc.collect(1)
    if device.type == "cuda":
        torch.cuda.empty_cache()


def rows_output(kind: ResultKind, rows: torch.Tensor) -> Output:
    """[n, dim] (or [n]) per-item rows -> float32 numpy Output."""
    values = rows.float().cpu().numpy()
    return Output(kind, values.reshape(len(values), -1))


def token_rows_output(kind: ResultKind, hidden: torch.Tensor, keep: torch.Tensor) -> Output:
    """A ragged Output of the rows of `hidden[n, L, d]` where `keep[n, L]` is true, item by item."""
    keep = keep.bool()
    values = hidden[keep].float().cpu().numpy()  # row-major: item 0's kept rows, then item 1's, ...
    offsets = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(keep.sum(dim=1).cpu().numpy(), out=offsets[1:])
    return Output(kind, values, offsets)


def without_padding(row: list[int], pad: int) -> list[int]:
    """A generated row without the padding a batch adds after a shorter sequence ends."""
    end = len(row)
    while end and row[end - 1] == pad:
        end -= 1
    return row[:end]


def generated_tokens(rows: list[list[int]]) -> Output:
    """Generated id rows as the ragged TOKENS output the frontend decodes: one id per result row."""
    return ragged(ResultKind.TOKENS, [np.asarray(row, np.float32).reshape(-1, 1) for row in rows])


def takes_token_types(model: torch.nn.Module) -> bool:
    # RoBERTa-style models have one token type; a non-zero type would index past their table.
    accepts = "token_type_ids" in inspect.signature(model.forward).parameters
    config = getattr(model, "config", None)
    return accepts and int(getattr(config, "type_vocab_size", 0) or 0) > 1


class HeldModel(Adapter):
    """One loaded model inside an adapter, a transformers one or a package's own torch module:
    usable until `close` drops it."""

    def __init__(self, model: torch.nn.Module, *, name: str) -> None:
        self.name = name
        parameter = next(model.parameters())  # where a module without transformers' .device is
        self.device = getattr(model, "device", parameter.device)
        self.dtype = getattr(model, "dtype", parameter.dtype)
        self._model: torch.nn.Module | None = model
        self._memory_bytes = tensor_bytes(model)

    def _live(self) -> Any:  # the model's own class, whose methods (generate, ...) its adapter calls
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        return self._model

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        release(self.device)


class BaseEncoder:
    """A model's base encoder (e.g. `model.bert`), run padding-free when its architecture allows
    (see `packed.py`) and through its own padded forward otherwise. Heads run on the result.

    A decoder made `bidirectional` (`make_bidirectional`) attends both ways: the packed forward
    reads that from its configuration, and the padded forward is also told `is_causal=False`, the
    argument a model's own bidirectional code (GritLM's) takes."""

    def __init__(self, base: torch.nn.Module, *, bidirectional: bool = False) -> None:
        self._base = base
        self._packed: PackedEncoder | PackedDecoder | None = PackedEncoder.wrap(base) or PackedDecoder.wrap(
            base
        )
        self._takes_token_types = takes_token_types(base)
        self._forward_kwargs = {"is_causal": False} if bidirectional else {}

    @property
    def is_padding_free(self) -> bool:
        return self._packed is not None

    def hidden_states(self, inputs: ForwardInputs, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Last hidden states [n, L, hidden] (zero or garbage on padding: mask before pooling).

        `key_mask` restricts which tokens are attended to (default: every real token)."""
        types = inputs.token_type_ids if self._takes_token_types else None
        with torch.inference_mode():
            if self._packed is not None:
                return self._packed.hidden_states(inputs.input_ids, inputs.lengths, types, key_mask)
            extra: dict[str, Any] = dict(self._forward_kwargs)
            if types is not None:
                extra["token_type_ids"] = types
            mask = inputs.attention_mask if key_mask is None else key_mask
            output = self._base(input_ids=inputs.input_ids, attention_mask=mask, **extra)
            hidden: torch.Tensor = output.last_hidden_state
            return hidden


def make_bidirectional(model: PreTrainedModel) -> None:
    """A decoder run with bidirectional attention (SIE's `forward_kwargs: {is_causal: false}`):
    transformers' decoders then build a padding-only mask instead of the causal one, and so does
    the packed forward (`PackedDecoder`)."""
    model.config.is_causal = False


def loading_options(config: ModelConfig, profile: str | None = None) -> dict[str, Any]:
    """from_pretrained's keyword arguments that a model's YAML decides: `config_kwargs` (overrides of
    config.json's attributes) and `trust_remote_code`, which runs modeling code shipped in the weights
    folder. Only a YAML grants the latter; no request can.

    `code_revision` pins the code a folder's `auto_map` takes from another repository
    (`org/code--module.Class`, as jina-colbert-v2 names jinaai/xlm-roberta-flash-implementation):
    transformers reads that repository's files at this commit from the local Hugging Face cache
    (`fetch_code_repositories` makes sure they are there), instead of its main branch. Code in the
    folder itself is the folder's revision, pinned by `hf_revision`."""
    loadtime = config.profile(profile).adapter_options.loadtime
    options: dict[str, Any] = dict(loadtime.get("config_kwargs") or {})
    if loadtime.get("trust_remote_code") is True:
        options["trust_remote_code"] = True
        if loadtime.get("code_revision"):
            options["code_revision"] = str(loadtime["code_revision"])
    return options


def load_model(
    auto_class: Any, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
) -> PreTrainedModel:
    """A model class's weights from the local folder, in the profile's precision, on `device`, eval."""
    torch_device = torch.device(device)
    chosen = config.profile(profile)
    dtype = compute_dtype(torch_device, chosen.compute_precision)
    model = from_pretrained(auto_class, weights_dir, dtype, **loading_options(config, profile))
    place(model, torch_device)
    return model
