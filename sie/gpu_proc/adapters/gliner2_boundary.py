"""GLiNER2.5 boundary checkpoints (gliner2 2.x, `"architecture": "boundary"`): entity candidates.

The row and its aux are the span network's (sie/gpu_proc/adapters/gliner2.py): text words are
found by `word_positions`, and schema 0's marker tokens carry -1: its [P], then one [E] per
label, each label's query.

One step on the device: the encoder, the word and [E] states gathered, and the boundary head,
which proposes and reranks up to C candidate spans per label. Per item the output holds, label
after label: the abstention probability (NaN when the head has none), the number n of eligible
candidates, then n rows of (start word, end word exclusive, probability, kept by the predicted
count), sie.gliner2_checkpoint's CANDIDATE_COLUMNS. Threshold, abstention, overlaps and characters
are the frontend's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.gliner2 import Gliner2Network, auto_loaded, encoded, word_positions
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class Gliner2BoundaryAdapter(Gliner2Network):
    def __init__(self, model: Any, *, name: str) -> None:
        """`model`: a loaded gliner2 2.x `BoundaryExtractor`."""
        super().__init__(model, name=name)
        settings = model.boundary_settings
        self._temperature = float(settings.pair_temperature)
        self._adaptive = bool(settings.adaptive_threshold)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> Gliner2BoundaryAdapter:
        model = auto_loaded(config, weights_dir, device, profile)
        if getattr(model, "architecture", None) != "boundary":
            raise ValueError(f"model '{config.sie_id}': not a GLiNER2 boundary checkpoint")
        return cls(model, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        with torch.inference_mode():
            hidden = encoded(self._model, self.name, inputs)
            routes = [row_positions(inputs.aux[i]) for i in range(len(hidden))]
            words, word_mask = _gathered(hidden, [w for w, _ in routes])
            queries, query_mask = _gathered(hidden, [q for _, q in routes])
            out = self._model.boundary_head(words, word_mask, queries, query_mask, return_candidates=True)
            candidates = out.candidates
            probs = torch.sigmoid(candidates.pair_logits / self._temperature).float()
            eligible = candidates.valid_mask & candidates.query_mask.unsqueeze(-1)
            counted = self._counted(probs, eligible, out.count_log_rates)
            null = torch.sigmoid(out.null_logits).float() if out.null_logits is not None else None
            per_item = _pack(
                candidates.indices.cpu().numpy(),
                probs.cpu().numpy(),
                eligible.cpu().numpy(),
                counted.cpu().numpy(),
                None if null is None else null.cpu().numpy(),
                [len(q) for _, q in routes],
            )
        return {ResultKind.TOKEN_SCORES: ragged(ResultKind.TOKEN_SCORES, per_item)}

    def _counted(
        self, probs: torch.Tensor, eligible: torch.Tensor, log_rates: torch.Tensor | None
    ) -> torch.Tensor:
        """Candidates within the head's predicted count per label, best first: gliner2 keeps them
        whatever the threshold when the checkpoint decodes with an adaptive threshold."""
        if not self._adaptive or log_rates is None:
            return torch.zeros_like(eligible)
        count = torch.exp(log_rates).round().long().clamp(min=0, max=probs.shape[-1])
        order = torch.argsort(probs.masked_fill(~eligible, -1e4), dim=-1, descending=True, stable=True)
        rank = torch.argsort(order, dim=-1)
        return eligible & (rank < count.unsqueeze(-1))


def row_positions(aux: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One row's word positions (one per word, in order) and its labels' [E] positions."""
    return word_positions(aux), (aux == -1).nonzero().squeeze(-1)[1:]  # the first is schema 0's [P]


def _gathered(hidden: torch.Tensor, positions: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """States at each row's positions, right-padded with zeros, and the mask of real ones."""
    longest = max((len(p) for p in positions), default=0)
    index = hidden.new_zeros((len(positions), longest), dtype=torch.long)
    mask = torch.zeros((len(positions), longest), dtype=torch.bool, device=hidden.device)
    for i, p in enumerate(positions):
        index[i, : len(p)] = p
        mask[i, : len(p)] = True
    states = hidden.gather(1, index.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
    return states * mask.unsqueeze(-1).to(states.dtype), mask


def _pack(
    indices: np.ndarray,
    probs: np.ndarray,
    eligible: np.ndarray,
    counted: np.ndarray,
    null: np.ndarray | None,
    n_queries: list[int],
) -> list[np.ndarray]:
    """Each item's labels in order: [abstention, n, n x (start, end, probability, counted)]."""
    out = []
    for i, n_labels in enumerate(n_queries):
        parts = []
        for q in range(n_labels):
            keep = np.nonzero(eligible[i, q])[0]
            rows = np.stack(
                [indices[i, q, keep, 0], indices[i, q, keep, 1], probs[i, q, keep], counted[i, q, keep]],
                axis=-1,
            ).astype(np.float32)
            abstention = np.float32("nan") if null is None else null[i, q]
            parts += [np.array([abstention, len(keep)], np.float32), rows.reshape(-1)]
        values = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        out.append(values.reshape(-1, 1))
    return out
