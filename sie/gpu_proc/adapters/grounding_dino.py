"""Grounding DINO open-set detection: an image + its labels' prompt -> per query a box and its
logit for every prompt token.

The forward is `GroundingDinoForObjectDetection`'s. A batch holds images of one size (the
frontend's batch key says so), so pixels stack without padding and the pixel mask is all ones,
as the processor gives a single image; prompts of different requests are right-padded, which
the model ignores (padding tokens are masked out of every attention and every logit). Each image
gets one row per query: cx, cy, w, h (relative to the image) and the logits of the batch's
prompt positions (-inf past an item's own prompt); thresholds, phrases and scaling are the
frontend's (`sie.frontend.grounding_dino`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, compute_dtype, loading_options, place
from sie.gpu_proc.outputs import Output, ragged
from sie.media_config import ImageSpec, image_spec
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

# Images per forward: a batch of large images (800 x 1333) is cut so activations stay bounded.
MAX_IMAGES_PER_FORWARD = 8


class GroundingDinoAdapter(HeldModel):
    kinds = frozenset({ResultKind.BOXES})

    def __init__(self, model: PreTrainedModel, spec: ImageSpec, *, name: str) -> None:
        super().__init__(model, name=name)
        self._normalizer = PixelNormalizer(spec, self.device)
        self.pad_token_id = int(getattr(model.config.text_config, "pad_token_id", None) or 0)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> GroundingDinoAdapter:
        from transformers import GroundingDinoForObjectDetection

        torch_device = torch.device(device)
        dtype = compute_dtype(torch_device, config.profile(profile).compute_precision)
        # The architecture's own attention choice, not `load_model`'s fallback to eager: that would
        # also make its BERT text encoder eager, which reads the phrase masks unlike SDPA (the default).
        model = GroundingDinoForObjectDetection.from_pretrained(
            weights_dir, local_files_only=True, dtype=dtype, **loading_options(config, profile)
        )
        place(model, torch_device)
        return cls(model, image_spec(weights_dir, "grounding_dino"), name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model: Any = self._live()
        assert inputs.pixels is not None  # every item is an image with its prompt
        n_tokens = inputs.input_ids.shape[1]
        rows = []
        with torch.inference_mode():
            for start in range(0, len(inputs.pixels), MAX_IMAGES_PER_FORWARD):
                part = slice(start, start + MAX_IMAGES_PER_FORWARD)
                pixels = self._normalizer(inputs.pixels[part], self.dtype)
                mask = torch.ones((pixels.shape[0], *pixels.shape[2:]), dtype=torch.int64, device=self.device)
                out = model(
                    pixel_values=pixels,
                    pixel_mask=mask,
                    input_ids=inputs.input_ids[part],
                    attention_mask=inputs.attention_mask[part],
                    token_type_ids=torch.zeros_like(inputs.input_ids[part]),
                )
                found = torch.cat([out.pred_boxes, out.logits[:, :, :n_tokens]], dim=2)
                rows.extend(found.float().cpu().numpy())
        return {ResultKind.BOXES: ragged(ResultKind.BOXES, rows)}
