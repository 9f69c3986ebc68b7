"""Token classification (BIO NER): raw per-token label logits, grouped into entities by the frontend.

Two backends behind one adapter, chosen by what the weights folder holds:

- torch weights (`*.safetensors`, `pytorch_model*.bin`): transformers'
  `AutoModelForTokenClassification` on the adapter's device;
- only ONNX weights (`onnx/*.onnx`, or the profile's `adapter_options.loadtime.onnx_file`):
  onnxruntime on CPU, inside the device process.

Why ONNX runs as shipped rather than being dequantized to safetensors at install: the Rampart PII
model ships only `onnx/model_q4.onnx`, whose linear layers are `com.microsoft.MatMulNBits` (4-bit
blocks with per-block scales) and whose embedding tables are quantized behind `DequantizeLinear`. A
conversion would need the `onnx` package and our own reading of those contrib ops, and would still
not be the model its authors validated, which is onnxruntime running its int4 kernels. Running the
file as it ships keeps the exact weights and numerics and needs no install step, and it is not
slow: on CPU it runs at the speed of a same-size fp32 torch encoder (32 sentences of 30 tokens:
0.23 s on one core of a shared 2-core box; MiniLM-L6 in torch, 0.31 s).

The price: on a GPU device process this family still runs on the host's CPU (the onnxruntime wheel
is CPU-only) and holds that process's loop for the batch's duration. `intra_op_num_threads`
follows torch's thread count, and thread spinning is off so that idle onnxruntime workers do not
burn the cores the frontends share.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

import numpy as np
import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    compute_dtype,
    from_pretrained,
    place,
    release,
    takes_token_types,
    tensor_bytes,
    token_rows_output,
)
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

TORCH_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
# onnxruntime's numpy dtypes for the tensor types an exported encoder's integer inputs use.
_ORT_INT_DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}


class Backend(Protocol):
    def logits(self, inputs: ForwardInputs) -> torch.Tensor:
        """Label logits [n, L, num_labels] for the padded run (padding rows are ignored)."""
        ...

    def memory_bytes(self) -> int: ...


class TokenClassificationAdapter(Adapter):
    kinds = frozenset({ResultKind.TOKEN_SCORES})

    def __init__(self, backend: Backend, *, name: str, device: torch.device, pad_token_id: int) -> None:
        self.name = name
        self.device = device
        self.pad_token_id = pad_token_id
        self._backend: Backend | None = backend
        self.is_padding_free = bool(getattr(backend, "is_padding_free", False))
        self._memory_bytes = backend.memory_bytes()

    @classmethod
    def load(cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None) -> Self:
        chosen = config.profile(profile)
        torch_device = torch.device(device)
        onnx_file = chosen.adapter_options.loadtime.get("onnx_file")
        backend: Backend
        if onnx_file is None and has_torch_weights(weights_dir):
            dtype = compute_dtype(torch_device, chosen.compute_precision)
            backend = TorchBackend.load(weights_dir, torch_device, dtype)
        else:
            backend = OnnxBackend.load(find_onnx(weights_dir, onnx_file))
        return cls(backend, name=config.sie_id, device=torch_device, pad_token_id=_pad_token_id(weights_dir))

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        """Each item's logits for its real tokens (special tokens included), [len_i, num_labels]."""
        if self._backend is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        logits = self._backend.logits(inputs)
        keep = inputs.attention_mask.to(logits.device)
        return {ResultKind.TOKEN_SCORES: token_rows_output(ResultKind.TOKEN_SCORES, logits, keep)}

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._backend is not None else 0

    def close(self) -> None:
        self._backend = None
        release(self.device)


class TorchBackend:
    def __init__(self, model: PreTrainedModel) -> None:
        self._model = model
        self._takes_token_types = takes_token_types(model)
        # BERT/RoBERTa-style taggers are an encoder plus dropout and a Linear per token: the
        # encoder then runs padding-free (see packed.py) and the Linear sees its hidden states.
        has_head = hasattr(model, "classifier") and hasattr(model, "dropout")
        self._encoder = BaseEncoder(model.base_model) if has_head else None
        self.is_padding_free = self._encoder is not None and self._encoder.is_padding_free

    @classmethod
    def load(cls, weights_dir: Path, device: torch.device, dtype: torch.dtype) -> TorchBackend:
        from transformers import AutoModelForTokenClassification  # deferred: slow to import

        model = from_pretrained(AutoModelForTokenClassification, weights_dir, dtype)
        place(model, device)
        return cls(model)

    def logits(self, inputs: ForwardInputs) -> torch.Tensor:
        if self.is_padding_free and self._encoder is not None:
            hidden = self._encoder.hidden_states(inputs)
            with torch.inference_mode():
                head: torch.Tensor = self._model.classifier(self._model.dropout(hidden))
                return head
        extra = {}
        if inputs.token_type_ids is not None and self._takes_token_types:
            extra["token_type_ids"] = inputs.token_type_ids
        with torch.inference_mode():
            output = self._model(input_ids=inputs.input_ids, attention_mask=inputs.attention_mask, **extra)
            logits: torch.Tensor = output.logits
            return logits

    def memory_bytes(self) -> int:
        return tensor_bytes(self._model)


class OnnxBackend:
    """An onnxruntime CPU session fed the graph's own input names and integer dtypes."""

    def __init__(self, session: Any, size_bytes: int) -> None:
        self._session = session
        self._size_bytes = size_bytes
        self._inputs = {i.name: _ORT_INT_DTYPES.get(i.type, np.int64) for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        self._output = "logits" if "logits" in outputs else outputs[0]

    @classmethod
    def load(cls, path: Path) -> OnnxBackend:
        import onnxruntime  # deferred: only models of this backend need it

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return cls(session, path.stat().st_size)

    def logits(self, inputs: ForwardInputs) -> torch.Tensor:
        given = {
            "input_ids": inputs.input_ids,
            "attention_mask": inputs.attention_mask,
            "token_type_ids": inputs.token_type_ids,
        }
        feed = {}
        for name, dtype in self._inputs.items():
            tensor = given.get(name)
            if tensor is None and name == "token_type_ids":
                tensor = torch.zeros_like(inputs.input_ids)  # a single segment
            if tensor is None:
                raise ValueError(f"ONNX graph wants an input '{name}' that a text batch does not have")
            feed[name] = tensor.cpu().numpy().astype(dtype, copy=False)
        (logits,) = self._session.run([self._output], feed)
        return torch.from_numpy(np.asarray(logits, dtype=np.float32))

    def memory_bytes(self) -> int:
        # Host memory, not device memory; the file size stands in for the session's weights.
        return self._size_bytes


def has_torch_weights(weights_dir: Path) -> bool:
    return any(next(weights_dir.glob(pattern), None) is not None for pattern in TORCH_WEIGHTS)


def find_onnx(weights_dir: Path, onnx_file: str | None) -> Path:
    """The profile's named file, else the only (or first by name) `*.onnx` under onnx/ or the folder."""
    if onnx_file is not None:
        path = weights_dir / onnx_file
        if not path.is_file():
            raise FileNotFoundError(f"{path} (adapter_options.loadtime.onnx_file) does not exist")
        return path
    found = sorted(weights_dir.glob("onnx/*.onnx")) or sorted(weights_dir.glob("*.onnx"))
    if not found:
        raise FileNotFoundError(f"{weights_dir} holds neither torch weights nor an ONNX file")
    return found[0]


def _pad_token_id(weights_dir: Path) -> int:
    with (weights_dir / "config.json").open() as fh:
        return int(json.load(fh).get("pad_token_id") or 0)
