"""ColPali (PaliGemma + a projection): a page image or a text query -> one unit vector per token.

An image item arrives as resized pixels plus its prompt's ids (the image placeholders, then
"<bos>Describe the image.\\n"), a query as its prompt's ids alone (sie.frontend.colpali); both run
through `ColPaliForRetrieval` as its processor's output would. Every token is in PaliGemma's
prefix (token type 0), so attention over the real tokens is bidirectional, as the processor's
`token_type_ids` make it. A batch of images is cut into runs of at most the profile's token
budget, since each image brings a thousand tokens while the batcher counts it as one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, load_model, token_rows_output
from sie.gpu_proc.outputs import Output
from sie.media_config import image_spec
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class ColPaliAdapter(HeldModel):
    kinds = frozenset({ResultKind.MULTIVECTOR})

    def __init__(
        self, model: PreTrainedModel, normalizer: PixelNormalizer, *, name: str, max_batch_tokens: int
    ) -> None:
        super().__init__(model, name=name)
        text_config = model.config.get_text_config()
        self.pad_token_id = int(getattr(text_config, "pad_token_id", None) or 0)
        self._normalizer = normalizer
        self._max_batch_tokens = max_batch_tokens

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ColPaliAdapter:
        from transformers import ColPaliForRetrieval  # deferred: importing transformers is slow

        model = load_model(ColPaliForRetrieval, config, weights_dir, device, profile)
        normalizer = PixelNormalizer(image_spec(weights_dir, "colpali"), model.device)
        budget = config.profile(profile).max_batch_tokens
        return cls(model, normalizer, name=config.sie_id, max_batch_tokens=budget)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        n, length = inputs.input_ids.shape
        rows = n if inputs.pixels is None else max(1, self._max_batch_tokens // max(1, length))
        parts = [self._embeddings(inputs, start, min(n, start + rows)) for start in range(0, n, rows)]
        vectors = torch.cat(parts) if len(parts) > 1 else parts[0]
        return {
            ResultKind.MULTIVECTOR: token_rows_output(ResultKind.MULTIVECTOR, vectors, inputs.attention_mask)
        }

    def _embeddings(self, inputs: ForwardInputs, start: int, stop: int) -> torch.Tensor:
        """[stop - start, L, dim] unit token vectors of items start..stop (zero on padding)."""
        ids = inputs.input_ids[start:stop]
        pixels = None
        if inputs.pixels is not None:
            pixels = self._normalizer(inputs.pixels[start:stop], self.dtype)
        with torch.inference_mode():
            output = self._live()(
                input_ids=ids,
                attention_mask=inputs.attention_mask[start:stop],
                pixel_values=pixels,
                token_type_ids=torch.zeros_like(ids),  # all prefix: bidirectional, as the processor's
            )
        embeddings: torch.Tensor = output.embeddings
        return embeddings
