"""GLiClass zero-shot classification (uni-encoder models), run through the `gliclass` package's model.

The frontend builds each sequence (labels, instruction and text joined by GLiClass's markers, see
sie/frontend/gliclass.py); this adapter runs the model's own forward on a padded run of them and
returns each item's label logits, one row per `<<LABEL>>` token it holds, for the frontend's
softmax or sigmoid. Items of one run may carry different label sets: slots past an item's labels
are dropped.

Two head layouts would let padding reach an item's scores, so their items run in groups that need
none: a pooling over every position (the published models pool the first token, or pass the tokens
to a masked scorer) groups by length, and the Hopfield scorer, whose softmax runs across label
slots, groups by label count. The scores are then those of the item run alone.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import Adapter, ForwardInputs
from sie.gpu_proc.adapters.common import compute_dtype, place, release, tensor_bytes
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

SERVED_ARCHITECTURE = "uni-encoder"
# Poolings that read only the first token, or hand every token to the scorer with its mask.
PADDING_FREE_POOLINGS = frozenset({"first", "pass"})
LABEL_COUPLED_SCORERS = frozenset({"hopfield"})


class GliclassAdapter(Adapter):
    kinds = frozenset({ResultKind.TOKEN_SCORES})

    def __init__(self, model: Any, *, name: str) -> None:
        """`model`: a loaded `gliclass.GLiClassModel`."""
        config = model.config
        architecture = getattr(config, "architecture_type", SERVED_ARCHITECTURE)
        if architecture != SERVED_ARCHITECTURE:
            raise ValueError(f"model '{name}': GLiClass {architecture!r} not supported (only uni-encoder)")
        self.name = name
        self._model: torch.nn.Module | None = model
        parameter = next(model.parameters())
        self.device, self.dtype = parameter.device, parameter.dtype
        self.pad_token_id = int(config.pad_token_id or 0)
        self.class_token_id = int(config.class_token_index)
        self._by_length = config.pooling_strategy not in PADDING_FREE_POOLINGS
        self._by_labels = config.scorer_type in LABEL_COUPLED_SCORERS
        self._memory_bytes = tensor_bytes(model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GliclassAdapter:
        from gliclass import GLiClassModel  # deferred: imports transformers and the gliclass package

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        # A local folder is read as is (no hub lookup); the encoder is built from the saved config.
        model = GLiClassModel.from_pretrained(str(weights_dir), local_files_only=True, dtype=dtype)
        place(model, torch_device)
        return cls(model, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        n_labels = ((inputs.input_ids == self.class_token_id) & inputs.attention_mask.bool()).sum(dim=1)
        counts = n_labels.tolist()
        groups = self._groups(inputs.lengths, counts)
        if len(groups) == 1:  # the usual run: one forward, each item's slots taken in one indexing
            logits = self.label_logits(inputs, groups[0], max(1, *counts))
            keep = torch.arange(logits.shape[1], device=logits.device)[None, :] < n_labels[:, None]
            values = logits[keep].float().cpu().numpy().reshape(-1, 1)  # row-major: item by item
        else:
            rows: list[torch.Tensor] = [torch.empty(0)] * len(counts)
            for group in groups:
                logits = self.label_logits(inputs, group, max(1, *(counts[i] for i in group)))
                for row, i in enumerate(group):
                    rows[i] = logits[row, : counts[i]]
            values = torch.cat(rows).float().cpu().numpy().reshape(-1, 1)
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        return {ResultKind.TOKEN_SCORES: Output(ResultKind.TOKEN_SCORES, values, offsets)}

    def label_logits(self, inputs: ForwardInputs, items: list[int], n_slots: int) -> torch.Tensor:
        """[len(items), n_slots] logits of the model's forward on those items of the run."""
        if self._model is None:
            raise RuntimeError(f"adapter for '{self.name}' is closed")
        whole = len(items) == len(inputs.lengths)
        index = None if whole else torch.tensor(items, device=inputs.input_ids.device)
        width = max(inputs.lengths[i] for i in items)
        ids, mask = inputs.input_ids, inputs.attention_mask
        if index is not None:
            ids, mask = ids.index_select(0, index), mask.index_select(0, index)
        with torch.inference_mode():
            # max_num_classes: a slot per label of the item with the most, as the pipeline passes.
            output = self._model(
                input_ids=ids[:, :width], attention_mask=mask[:, :width], max_num_classes=n_slots
            )
        logits: torch.Tensor = output.logits
        return logits

    def _groups(self, lengths: list[int], counts: list[int]) -> list[list[int]]:
        """The run's items in groups that pad against each other without changing their scores."""
        if not (self._by_length or self._by_labels):
            return [list(range(len(lengths)))]
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for i, (length, count) in enumerate(zip(lengths, counts, strict=True)):
            groups[(length if self._by_length else 0, count if self._by_labels else 0)].append(i)
        return list(groups.values())

    def memory_bytes(self) -> int:
        return self._memory_bytes if self._model is not None else 0

    def lora_target(self) -> torch.nn.Module | None:
        return self._model

    def close(self) -> None:
        self._model = None
        release(self.device)
