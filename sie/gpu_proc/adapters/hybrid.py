"""BGE-M3-style hybrid encoders: dense, sparse and multi-vector outputs from one encoder pass.

The folder holds the encoder (transformers `AutoModel`, XLM-R for BGE-M3) and two heads saved by
FlagEmbedding as Linear state dicts (`weight`, `bias`):
- dense: the first token's ([CLS]/<s>) last hidden state;
- sparse: `relu(sparse_linear(hidden))`, one weight per token; an item's weight for a vocabulary
  id is the largest weight of its tokens with that id, special tokens and zero weights left out;
- multi-vector: `colbert_linear(hidden)` of every real token after the first.
Nothing is normalized here: the frontend L2-normalizes dense rows and each token vector.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import (
    BaseEncoder,
    compute_dtype,
    from_pretrained,
    loading_options,
    place,
    release,
    rows_output,
    tensor_bytes,
    token_rows_output,
)
from sie.gpu_proc.outputs import Output
from sie.model_location import find_tokenizer_file
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

SPARSE_HEAD = "sparse_linear.pt"
COLBERT_HEAD = "colbert_linear.pt"
# The tokenizer roles whose tokens never get a sparse weight (FlagEmbedding drops cls, eos, pad and
# unk; BERT-style vocabularies call eos "sep"), and the config.json fields that may name them too.
SPECIAL_ROLES = ("cls_token", "bos_token", "eos_token", "sep_token", "pad_token", "unk_token")
SPECIAL_CONFIG_IDS = ("cls_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "pad_token_id")


class HybridAdapter(Adapter):
    kinds = frozenset({ResultKind.DENSE, ResultKind.SPARSE, ResultKind.MULTIVECTOR})

    def __init__(
        self,
        model: PreTrainedModel,
        sparse_linear: torch.nn.Linear,
        colbert_linear: torch.nn.Linear,
        *,
        name: str,
        special_ids: list[int],
    ) -> None:
        self.name = name
        self.device = model.device
        self.dtype = model.dtype
        self.dim = int(model.config.hidden_size)
        self.colbert_dim = int(colbert_linear.out_features)
        self.vocab_size = int(model.config.vocab_size)
        self.pad_token_id = int(getattr(model.config, "pad_token_id", None) or 0)
        self.special_ids = sorted(set(special_ids))
        self._model: PreTrainedModel | None = model
        self._sparse_linear = sparse_linear
        self._colbert_linear = colbert_linear
        self._special = torch.tensor(self.special_ids, dtype=torch.long, device=self.device)
        self._encoder: BaseEncoder | None = BaseEncoder(model)
        self.is_padding_free = self._encoder.is_padding_free
        self._memory_bytes = tensor_bytes(model, sparse_linear, colbert_linear)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> HybridAdapter:
        from transformers import AutoModel  # deferred: importing transformers costs a second or more

        chosen = config.profile(profile)
        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, chosen.compute_precision)
        model = from_pretrained(AutoModel, weights_dir, dtype, **loading_options(config, profile))
        place(model, torch_device)
        heads = [load_linear(weights_dir / name).to(dtype=dtype) for name in (SPARSE_HEAD, COLBERT_HEAD)]
        for head in heads:
            place(head, torch_device)
        special = special_token_ids(weights_dir, model.config.to_dict())
        return cls(model, heads[0], heads[1], name=config.sie_id, special_ids=special)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if self._encoder is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        hidden = self._encoder.hidden_states(inputs)
        outputs: dict[ResultKind, Output] = {}
        with torch.inference_mode():
            if ResultKind.DENSE in wanted:
                outputs[ResultKind.DENSE] = rows_output(ResultKind.DENSE, hidden[:, 0])
            if ResultKind.SPARSE in wanted:
                weights = torch.relu(self._sparse_linear(hidden)).squeeze(-1)
                keep = inputs.attention_mask.bool() & ~torch.isin(inputs.input_ids, self._special)
                outputs[ResultKind.SPARSE] = max_per_token_id(
                    weights, inputs.input_ids, keep, self.vocab_size
                )
            if ResultKind.MULTIVECTOR in wanted:
                vectors = self._colbert_linear(hidden[:, 1:])
                kept = inputs.attention_mask[:, 1:]
                outputs[ResultKind.MULTIVECTOR] = token_rows_output(ResultKind.MULTIVECTOR, vectors, kept)
        return outputs

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        self._encoder = None
        release(self.device)


def load_linear(path: Path) -> torch.nn.Linear:
    """A Linear from a state dict saved with torch.save (its shape read from the weight)."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    out_features, in_features = state["weight"].shape
    linear = torch.nn.Linear(in_features, out_features, bias="bias" in state)
    linear.load_state_dict(state)
    return linear


def special_token_ids(weights_dir: Path, config: dict[str, Any]) -> list[int]:
    """Ids of the special tokens named by config.json and by the tokenizer files' roles."""
    ids = {int(config[key]) for key in SPECIAL_CONFIG_IDS if config.get(key) is not None}
    tokenizer_file = find_tokenizer_file(weights_dir)  # its own, or converted from a slow tokenizer
    if tokenizer_file is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        for content in _special_token_contents(weights_dir):
            token_id = tokenizer.token_to_id(content)
            if token_id is not None:
                ids.add(token_id)
    return sorted(ids)


def _special_token_contents(weights_dir: Path) -> set[str]:
    contents: set[str] = set()
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = weights_dir / name
        if not path.is_file():
            continue
        roles = json.loads(path.read_text())
        for role in SPECIAL_ROLES:
            value = roles.get(role)
            # A role is a string, or an AddedToken mapping with the string under "content".
            content = value.get("content") if isinstance(value, dict) else value
            if isinstance(content, str):
                contents.add(content)
    return contents


def max_per_token_id(
    weights: torch.Tensor, input_ids: torch.Tensor, keep: torch.Tensor, vocab: int
) -> Output:
    """Ragged SPARSE Output: per item, the largest positive `weights` of each kept token id.

    On the device: each kept token gets the key item * vocab + id; the sorted unique keys come out
    grouped by item with ascending ids, and a scatter-max over the inverse picks each key's weight.
    """
    keep = keep & (weights > 0)
    n, length = input_ids.shape
    items = torch.arange(n, device=input_ids.device).unsqueeze(1).expand(n, length)
    keys = items[keep] * vocab + input_ids[keep]
    unique, inverse = torch.unique(keys, sorted=True, return_inverse=True)
    kept = weights[keep]
    best = torch.zeros(len(unique), dtype=kept.dtype, device=kept.device)
    best.scatter_reduce_(0, inverse, kept, reduce="amax", include_self=False)
    counts = torch.bincount(torch.div(unique, vocab, rounding_mode="floor"), minlength=n).cpu().numpy()
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    indices = (unique % vocab).to(torch.int32).cpu().numpy()
    return Output(ResultKind.SPARSE, best.float().cpu().numpy(), offsets, indices)
