"""OWLv2 open-vocabulary detection: images + label queries -> per patch a box and its best label.

The forward is `Owlv2ForObjectDetection`'s, taken apart so that the images of one batch may come
from requests with different labels: the image tower and the box head run on the whole batch,
the label queries (each item's tokens; `aux` numbers the label a token belongs to) are embedded
once per distinct label set, and the class head runs per image with its own queries. Each image
gets one row per patch: cx, cy, w, h (relative to the padded square input), the best label's
logit and that label's index, which is everything `post_process_object_detection` reads (the
frontend applies the sigmoid, the threshold and the scaling to the original image).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer, image_flops
from sie.gpu_proc.adapters.common import HeldModel, load_model
from sie.gpu_proc.outputs import Output, ragged
from sie.media_config import ImageSpec, image_spec
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

LabelSet = tuple[tuple[int, ...], ...]


class Owlv2Adapter(HeldModel):
    kinds = frozenset({ResultKind.BOXES})
    # Label queries are padded with "!" (id 0), as OWL's processor pads them; the text tower pools
    # at the highest id (end of text), so padding never moves the pooled position.
    pad_token_id = 0

    def __init__(self, model: PreTrainedModel, spec: ImageSpec, *, name: str) -> None:
        super().__init__(model, name=name)
        self._normalizer = PixelNormalizer(spec, self.device)
        self.media_flops_per_item = image_flops(model.config.vision_config, model)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> Owlv2Adapter:
        from transformers import Owlv2ForObjectDetection

        model = load_model(Owlv2ForObjectDetection, config, weights_dir, device, profile)
        return cls(model, image_spec(weights_dir, "owlv2"), name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model: Any = self._live()
        assert inputs.pixels is not None and inputs.aux is not None  # images with label queries
        label_sets = _label_sets(inputs)
        with torch.inference_mode():
            feature_map, _ = model.image_embedder(pixel_values=self._normalizer(inputs.pixels, self.dtype))
            n, height, width, dim = feature_map.shape
            image_feats = feature_map.reshape(n, height * width, dim)
            boxes = model.box_predictor(image_feats, feature_map)
            queries = {labels: self._embed_labels(model, labels) for labels in set(label_sets)}
            rows = []
            for i, labels in enumerate(label_sets):
                logits, _ = model.class_predictor(image_feats[i : i + 1], queries[labels][None], None)
                best, index = logits[0].max(dim=-1)
                rows.append(torch.cat([boxes[i], best[:, None], index[:, None].to(boxes.dtype)], dim=1))
        return {ResultKind.BOXES: ragged(ResultKind.BOXES, [r.float().cpu().numpy() for r in rows])}

    def _embed_labels(self, model: Any, labels: LabelSet) -> torch.Tensor:
        """Normalized projected text embeddings of each label, as Owlv2Model hands the heads."""
        longest = max(len(ids) for ids in labels)
        ids = torch.full((len(labels), longest), self.pad_token_id, dtype=torch.int64, device=self.device)
        mask = torch.zeros_like(ids)
        for row, label in enumerate(labels):
            ids[row, : len(label)] = torch.tensor(label, device=self.device)
            mask[row, : len(label)] = 1
        features = model.owlv2.get_text_features(input_ids=ids, attention_mask=mask)
        embeds = features if isinstance(features, torch.Tensor) else features.pooler_output
        return embeds / torch.linalg.norm(embeds, ord=2, dim=-1, keepdim=True)


def _label_sets(inputs: ForwardInputs) -> list[LabelSet]:
    """Per item, its label queries as token tuples (aux numbers each token's label)."""
    assert inputs.aux is not None
    out = []
    for i, length in enumerate(inputs.lengths):
        ids = inputs.input_ids[i, :length].tolist()
        which = inputs.aux[i, :length].tolist()
        labels: dict[int, list[int]] = {}
        for token, label in zip(ids, which, strict=True):
            labels.setdefault(label, []).append(token)
        out.append(tuple(tuple(labels[k]) for k in sorted(labels)))
    return out
