"""GLiNER2.5-Decide (gliner2 2.x span or boundary checkpoints): one logit per label.

The frontend (sie/frontend/gliner2_decide.py) sends each item as one row, every task's prompt and
labels before the document, with -1 in the aux at each label's [L] marker. One step: the encoder,
then the checkpoint's classifier head on the state at every marker of the batch at once. Per item
the output holds its labels' logits in row order; probabilities and answers are the frontend's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.gliner2 import Gliner2Network, auto_loaded, encoded
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from sie.model_config import ModelConfig


class Gliner2DecideAdapter(Gliner2Network):
    reads_words = False  # only the label markers are read

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> Gliner2DecideAdapter:
        return cls(auto_loaded(config, weights_dir, device, profile), name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        with torch.inference_mode():
            hidden = encoded(self._model, self.name, inputs)
            markers = inputs.aux < 0
            logits = self._model.classifier(hidden[markers]).squeeze(-1).float().cpu().numpy()
        counts = markers.sum(dim=1).cpu().numpy()
        per_item = np.split(logits.reshape(-1, 1), np.cumsum(counts)[:-1])
        return {ResultKind.TOKEN_SCORES: ragged(ResultKind.TOKEN_SCORES, per_item)}
