"""GLiNER joint entity-relation ("relex") models, device half: gliner's own forward, packed per item.

The frontend (sie/frontend/gliner_relex.py) builds the prompt with its `<<REL>>` part and sends
the request's entity threshold in the batch's float parameter (`ForwardInputs.scalar`, which
carries a generation's temperature for other families); the frontend keys batches by it, so one
batch has one threshold. The forward picks relation candidates with it, so it must run here.

Item i's rows (one value each): its span logits as the plain GLiNER adapter returns them, then for
every pair the model kept, head start word, head end word, tail start word, tail end word and the
pair's logit for each of the item's relation types.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.gliner import GlinerAdapter
from sie.gpu_proc.outputs import Output
from sie.shm.layout import ResultKind

SERVED_CLASS = "UniEncoderSpanRelexGLiNER"
# Both as in sie.frontend.gliner_relex (not imported: the device imports no frontend module).
MAX_RELATION_CANDIDATES = 100
MIN_ADJACENCY_THRESHOLD = 0.5


class GlinerRelexAdapter(GlinerAdapter):
    served_class = SERVED_CLASS

    def __init__(self, gliner: Any, *, name: str) -> None:
        super().__init__(gliner, name=name)
        self.rel_token_id = int(gliner.config.rel_token_index)
        cap_relation_candidates(gliner.model, MAX_RELATION_CANDIDATES)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        if inputs.aux is None:
            raise ValueError(f"model '{self.name}': GLiNER needs the words_mask aux the frontend sends")
        n_words = inputs.aux.amax(dim=1)
        n_labels = self.label_counts(inputs.input_ids, inputs.attention_mask)
        real = inputs.attention_mask.bool()
        n_relations = ((inputs.input_ids == self.rel_token_id) & real).sum(dim=1).tolist()
        threshold = float(inputs.scalar)
        output = self.run_model(
            inputs,
            n_words.tolist(),
            threshold=threshold,
            adjacency_threshold=max(threshold, MIN_ADJACENCY_THRESHOLD),
        )
        values, counts = self.item_logits(output.logits, n_words, n_labels)
        spans = np.split(values.reshape(-1), np.cumsum(counts.numpy())[:-1])
        pairs = _pair_rows(output, n_relations)
        rows = [np.concatenate([span, pair]) for span, pair in zip(spans, pairs, strict=True)]
        offsets = np.zeros(len(rows) + 1, np.int64)
        np.cumsum([len(row) for row in rows], out=offsets[1:])
        return {
            ResultKind.TOKEN_SCORES: Output(ResultKind.TOKEN_SCORES, np.concatenate(rows)[:, None], offsets)
        }


def _pair_rows(output: Any, n_relations: list[int]) -> list[np.ndarray]:
    """Per item: [head start, head end, tail start, tail end, logit per relation type] per kept pair."""
    rel_idx, rel_mask, rel_logits = output.rel_idx, output.rel_mask, output.rel_logits
    spans = output.entity_spans
    rows = []
    for b, n_rel in enumerate(n_relations):
        if n_rel == 0 or rel_idx is None or rel_logits is None or spans is None:
            rows.append(np.zeros(0, np.float32))
            continue
        pairs = rel_idx[b]
        valid = rel_mask[b].bool() & (pairs >= 0).all(dim=-1)
        pairs = pairs[valid]
        head, tail = spans[b][pairs[:, 0]], spans[b][pairs[:, 1]]
        row = torch.cat([head.float(), tail.float(), rel_logits[b][valid][:, :n_rel].float()], dim=1)
        rows.append(row.cpu().numpy().reshape(-1))
    return rows


def cap_relation_candidates(model: Any, limit: int) -> None:
    """Keep at most `limit` relation candidates per item (the first ones, in span order).

    gliner's `represent_spans` returns (scores, candidate reps, candidate mask, candidate spans),
    the candidates packed at the front of each row; every ordered pair of them is scored, so a long
    text with a low threshold would build thousands. Entity scores are not touched.
    """
    represent_spans = model.represent_spans

    def capped(*args: Any, **kwargs: Any) -> Any:
        outputs = represent_spans(*args, **kwargs)
        scores, reps, mask, spans, *rest = outputs
        if reps is None or reps.size(1) <= limit:
            return outputs
        return (scores, reps[:, :limit], mask[:, :limit], spans[:, :limit], *rest)

    model.represent_spans = capped
