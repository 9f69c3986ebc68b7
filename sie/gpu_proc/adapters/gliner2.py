"""GLiNER2 (fastino's schema extractor, gliner2 span checkpoints): the encoder and its heads.
GLiNER2.5's boundary checkpoints load as gliner2_boundary.py's adapter instead.

The frontend (sie/frontend/gliner2.py) builds the row gliner2's processor builds, schemas first
(`( [P] name ( [E] label ... ) )`, joined by [SEP_STRUCT]), then [SEP_TEXT] and the lowercased
words, and sends per-token roles as the aux: on a word's first sub-token the number of words up
to and including it (see `word_positions`), `-(j + 1)` on each marker token ([P], then one
[E]/[C]/[L] per field) of schema j, 0 elsewhere.

Per item and schema, in schema order, the output holds raw values the frontend decodes:
- a classification schema ([L] fields): one logit per label (the classifier head);
- a span schema ([E]/[C] fields): the predicted instance count c (argmax of the count head), then
  c * fields * words * max_width sigmoid span scores, as gliner2's `_extract_span_result` has them.
The weights load through the package's Extractor (its module layout); the forward is ours.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gliner2_checkpoint import Gliner2Checkpoint
from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import compute_dtype, place, release, tensor_bytes
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

CLASSIFICATION_MARKER = "[L]"


class Gliner2Network(Adapter):
    """What every gliner2 adapter holds: the loaded model and its encoder's place and dtype."""

    kinds = frozenset({ResultKind.TOKEN_SCORES})
    reads_words = True  # the heads read words at their first sub-token: other poolings are refused

    def __init__(self, model: Any, *, name: str) -> None:
        pooling = model.config.token_pooling
        if self.reads_words and pooling != "first":
            raise ValueError(
                f"model '{name}': GLiNER2 token_pooling {pooling!r} not supported (only 'first')"
            )
        self.name = name
        self._model: Any = model
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.pad_token_id = int(model.processor.tokenizer.pad_token_id or 0)
        self._memory_bytes = tensor_bytes(model)

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model if isinstance(self._model, torch.nn.Module) else None

    def close(self) -> None:
        self._model = None
        release(self.device)


class Gliner2Adapter(Gliner2Network):
    def __init__(self, model: Any, *, name: str) -> None:
        """`model`: a loaded `gliner2.model.Extractor`."""
        super().__init__(model, name=name)
        self.max_width = int(model.config.max_width)
        tokenizer = model.processor.tokenizer
        self.classification_id = int(tokenizer.convert_tokens_to_ids(CLASSIFICATION_MARKER))

    @classmethod
    def load(cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None) -> Adapter:
        if Gliner2Checkpoint.read(weights_dir).architecture == "boundary":
            from sie.gpu_proc.adapters.gliner2_boundary import Gliner2BoundaryAdapter

            return Gliner2BoundaryAdapter.load(config, weights_dir, device, profile)
        from gliner2.model import Extractor  # deferred: imports transformers

        precision = config.profile(profile).compute_precision
        model = loaded(Extractor.from_pretrained, weights_dir, device, precision)
        return cls(model, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        with torch.inference_mode():
            hidden = encoded(self._model, self.name, inputs)
            words = [hidden[i, word_positions(inputs.aux[i])] for i in range(len(hidden))]
            spans = self.span_reps(words)
            per_item = [
                self._item_values(hidden[i], inputs.input_ids[i], inputs.aux[i], spans[i])
                for i in range(len(hidden))
            ]
        return {ResultKind.TOKEN_SCORES: ragged(ResultKind.TOKEN_SCORES, per_item)}

    def span_reps(self, words: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each item's span vectors [n_words, max_width, hidden], all items in one span-layer call."""
        lengths = [len(w) for w in words]
        longest = max(lengths)
        if longest == 0:
            return [w.new_zeros(0, self.max_width, w.shape[-1]) for w in words]
        padded = words[0].new_zeros(len(words), longest, words[0].shape[-1])
        for i, w in enumerate(words):
            padded[i, : len(w)] = w
        reps = self._model.span_rep(padded, span_grid(lengths, self.max_width, padded.device))
        return [reps[i, :n] for i, n in enumerate(lengths)]

    def _item_values(
        self, hidden: torch.Tensor, ids: torch.Tensor, aux: torch.Tensor, span_rep: torch.Tensor
    ) -> np.ndarray:
        n_schemas = int(-aux.min().clamp(max=0))
        parts = []
        for j in range(n_schemas):
            positions = (aux == -(j + 1)).nonzero().squeeze(-1)
            markers = hidden[positions]
            if int(ids[positions[1]]) == self.classification_id:
                parts.append(self._model.classifier(markers[1:]).squeeze(-1))
            else:
                parts.append(self._span_scores(markers, span_rep))
        if not parts:
            return np.zeros((0, 1), np.float32)
        values: np.ndarray = torch.cat([p.reshape(-1) for p in parts]).float().reshape(-1, 1).cpu().numpy()
        return values

    def _span_scores(self, markers: torch.Tensor, span_rep: torch.Tensor) -> torch.Tensor:
        """[count, then count x fields x words x width scores]: the count head picks how many
        instances the schema has; each instance projects the field markers through the count layer."""
        count = int(self._model.count_pred(markers[:1]).argmax(dim=1))
        if count <= 0 or len(span_rep) == 0:
            return markers.new_zeros(1)
        instances = self._model.count_embed(markers[1:], count)  # [count (at most 20), fields, hidden]
        scores = torch.sigmoid(torch.einsum("lkd,bpd->bplk", span_rep, instances))
        return torch.cat([markers.new_tensor([float(len(instances))]), scores.reshape(-1)])


def loaded(from_pretrained: Any, weights_dir: Path, device: str, precision: str) -> Any:
    """A gliner2 model read from its folder on the CPU, then cast and placed, in eval mode."""
    torch_device = torch.device(device)
    with contextlib.redirect_stdout(io.StringIO()):  # gliner2 prints a config banner on build
        model = from_pretrained(str(weights_dir), map_location="cpu")
    model.to(compute_dtype(torch_device, precision))
    model.eval()
    place(model, torch_device)
    return model


def auto_loaded(config: ModelConfig, weights_dir: Path, device: str, profile: str | None) -> Any:
    """The checkpoint as gliner2 2.x's AutoExtractor builds it (span or boundary network)."""
    from gliner2 import AutoExtractor  # deferred: imports torch and transformers

    precision = config.profile(profile).compute_precision
    return loaded(AutoExtractor.from_pretrained, weights_dir, device, precision)


def encoded(model: Any, name: str, inputs: ForwardInputs) -> torch.Tensor:
    """The encoder's last hidden states of a batch whose rows carry the frontend's token roles."""
    if model is None:
        raise RuntimeError(f"adapter for '{name}' is closed")
    if inputs.aux is None:
        raise ValueError(f"model '{name}': GLiNER2 needs the token roles (aux) the frontend sends")
    hidden: torch.Tensor = model.encoder(
        input_ids=inputs.input_ids, attention_mask=inputs.attention_mask
    ).last_hidden_state
    return hidden


def word_positions(aux: torch.Tensor) -> torch.Tensor:
    """Token positions of a row's words, one per word in order. The aux on a word's first sub-token
    counts the words up to it, so a word with no sub-token takes the next word's position."""
    firsts = (aux > 0).nonzero().squeeze(-1)
    if not len(firsts):
        return firsts
    counts = aux[firsts]
    return firsts[torch.searchsorted(counts, torch.arange(1, int(counts[-1]) + 1, device=aux.device))]


def span_grid(lengths: list[int], max_width: int, device: torch.device) -> torch.Tensor:
    """Every (start, start + width) word span of the longest item, [n, W * max_width, 2]; spans past
    an item's words point at (0, 0), as gliner2 makes them safe to gather (their scores are dropped)."""
    longest = max(lengths)
    starts = torch.arange(longest, device=device).repeat_interleave(max_width)
    ends = starts + torch.arange(max_width, device=device).repeat(longest)
    valid = ends[None, :] < torch.tensor(lengths, device=device)[:, None]
    grid = torch.stack([starts.expand_as(valid), ends.expand_as(valid)], dim=-1)
    return torch.where(valid[..., None], grid, torch.zeros_like(grid))
