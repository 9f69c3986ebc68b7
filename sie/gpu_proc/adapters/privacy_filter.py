"""OpenAI's privacy filter: a token classifier (transformers' `OpenAIPrivacyFilterForTokenClassification`)
whose per-token logits the frontend decodes (sie.frontend.privacy_filter).

Its attention has no SDPA path in transformers, so without flash attention it runs eagerly and holds
every row's [heads, L, L] scores at once: a batch of long windows runs in row groups that bound them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Self

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.token_classification import TokenClassificationAdapter
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

# Attention scores held at once per row group, in elements (float32: 1 GiB).
ATTENTION_ELEMENTS = 1 << 28


class PrivacyFilterAdapter(TokenClassificationAdapter):
    heads = 1  # attention heads, read from config.json at load

    @classmethod
    def load(cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None) -> Self:
        adapter = super().load(config, weights_dir, device, profile)
        with (weights_dir / "config.json").open() as fh:
            adapter.heads = int(json.load(fh).get("num_attention_heads") or 1)
        return adapter

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        rows = len(inputs.lengths)
        per_row = self.heads * int(inputs.input_ids.shape[1]) ** 2
        group = max(1, ATTENTION_ELEMENTS // per_row)
        if group >= rows:
            return super().forward(inputs, wanted)
        forward = super().forward
        parts = [forward(_rows(inputs, start, start + group), wanted) for start in range(0, rows, group)]
        return {ResultKind.TOKEN_SCORES: _joined([part[ResultKind.TOKEN_SCORES] for part in parts])}


def _rows(inputs: ForwardInputs, start: int, stop: int) -> ForwardInputs:
    """Rows start..stop of a padded run, cut to their own longest length."""
    lengths = inputs.lengths[start:stop]
    width = max(lengths)

    def cut(tensor: torch.Tensor | None) -> torch.Tensor | None:
        return None if tensor is None else tensor[start:stop, :width]

    return replace(
        inputs,
        input_ids=inputs.input_ids[start:stop, :width],
        attention_mask=inputs.attention_mask[start:stop, :width],
        token_type_ids=cut(inputs.token_type_ids),
        aux=cut(inputs.aux),
        lengths=lengths,
    )


def _joined(parts: list[Output]) -> Output:
    """Ragged outputs of consecutive row groups as one."""
    offsets = [np.zeros(1, np.int64)]
    base = 0
    for part in parts:
        assert part.row_offsets is not None
        offsets.append(part.row_offsets[1:] + base)
        base += int(part.row_offsets[-1])
    values = np.concatenate([part.values for part in parts])
    return Output(parts[0].kind, values, np.concatenate(offsets))
