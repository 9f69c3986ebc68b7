"""CLIP and SigLIP: one vector space for text and images, each through its own tower.

A text batch goes through `get_text_features`, an image batch through `get_image_features` (the
batcher never mixes them), both projected and not normalized (the frontend normalizes, as for
dense). Pixels arrive resized and cropped; normalization to the model's mean and std runs here,
folded into the patch embedding's weights for a float32 model (`patches.py`). CLIP's image tower
runs as a plain function over its modules (`clip_vision.py`), on a GPU replayed from CUDA graphs
(`item_graphs.py`); SigLIP's as transformers runs it.
SigLIP's text tower pools the last position and was trained on text padded to its full length
without an attention mask, so its text is padded that way (as its processor's `padding="max_length"`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from sie.gpu_proc.adapters import clip_vision
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import HeldModel, load_model, rows_output
from sie.gpu_proc.adapters.item_graphs import ItemReplays
from sie.gpu_proc.adapters.patches import Scratch, fold_into
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.threads import linear_weights_of
from sie.media_config import ImageSpec, image_spec
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class PixelNormalizer:
    """Received pixels [n, H, W, 3] -> the model's normalized float [n, 3, H, W].

    One float copy, rescaled and normalized in place: no temporaries (allocating and filling
    three of them was a quarter of the device's time on a small CLIP). The arithmetic stays the
    image processor's, (x * scale - mean) / std, so results equal it bit for bit.
    """

    def __init__(self, spec: ImageSpec, device: torch.device) -> None:
        self.scale = spec.device_scale
        self.do_normalize = spec.do_normalize
        self.mean = torch.tensor(spec.mean, dtype=torch.float32, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(spec.std, dtype=torch.float32, device=device).view(1, 3, 1, 1)

    def __call__(self, pixels: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        n, height, width, _ = pixels.shape
        values = torch.empty((n, 3, height, width), dtype=torch.float32, device=pixels.device)
        values.copy_(pixels.permute(0, 3, 1, 2))
        if self.scale != 1.0:
            values.mul_(self.scale)
        if self.do_normalize:
            values.sub_(self.mean).div_(self.std)
        return values.to(dtype)


def image_flops(vision_config: Any, *vision: torch.nn.Module) -> float:
    """FLOPs of one image through the vision tower's linear layers: 2 x weights x patches."""
    patches = (int(vision_config.image_size) // int(vision_config.patch_size)) ** 2 + 1
    return 2.0 * linear_weights_of(*vision) * patches


class ClipAdapter(HeldModel):
    kinds = frozenset({ResultKind.DENSE})

    def __init__(self, model: PreTrainedModel, spec: ImageSpec, *, name: str) -> None:
        super().__init__(model, name=name)
        text_config = model.config.text_config
        self.pad_token_id = int(text_config.pad_token_id or 0)
        self.is_siglip = "siglip" in str(model.config.model_type)
        self._text_length = int(text_config.max_position_embeddings)
        # None where the patch embedding folds the normalization in (float32 models, patches.py).
        folded = fold_into(model.vision_model.embeddings, spec)
        self._normalizer = None if folded else PixelNormalizer(spec, self.device)
        self._received = Scratch()  # the batch's pixels in the model's dtype, reused (see patches.py)
        self.lean_vision = clip_vision.fits(model)  # CLIP's image tower without transformers' wrapping
        vision = [model.vision_model, getattr(model, "visual_projection", None)]
        self.media_flops_per_item = image_flops(model.config.vision_config, *[m for m in vision if m])
        self._image_replays = ItemReplays(model, self._image_features, self.media_flops_per_item)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ClipAdapter:
        from transformers import AutoModel  # deferred: importing transformers costs a second or more

        model = load_model(AutoModel, config, weights_dir, device, profile)
        return cls(model, image_spec(weights_dir, "clip"), name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model = self._live()
        with torch.inference_mode():
            if inputs.pixels is not None and self.lean_vision:
                features = self._image_replays.run(inputs.pixels)
                if features is None:
                    features = self._image_features(inputs.pixels)
            elif inputs.pixels is not None:
                features = model.get_image_features(pixel_values=self._pixel_values(inputs.pixels))
            else:
                features = model.get_text_features(**self._text_inputs(inputs))
        return {ResultKind.DENSE: rows_output(ResultKind.DENSE, _pooled(features))}

    def close(self) -> None:
        self._image_replays.close()  # its graphs, and its hold on this adapter and the model
        super().close()

    def _image_features(self, pixels: torch.Tensor) -> torch.Tensor:
        """[n, projection] from received pixels through the lean image tower."""
        return clip_vision.image_features(self._live(), self._pixel_values(pixels))

    def _pixel_values(self, pixels: torch.Tensor) -> torch.Tensor:
        """[n, 3, H, W] for the vision tower: where the patch embedding folds the normalization
        in, the received values in the model's dtype (a reused buffer, channels last), else
        normalized. One forward runs at a time, so the buffer is never shared."""
        if self._normalizer is not None:
            return self._normalizer(pixels, self.dtype)
        received = self._received.take(tuple(pixels.shape), self.dtype, pixels.device)
        return received.copy_(pixels).permute(0, 3, 1, 2)

    def _text_inputs(self, inputs: ForwardInputs) -> dict[str, torch.Tensor]:
        if not self.is_siglip:
            return {"input_ids": inputs.input_ids, "attention_mask": inputs.attention_mask}
        ids = inputs.input_ids[:, : self._text_length]
        padded = torch.full(
            (len(ids), self._text_length), self.pad_token_id, dtype=ids.dtype, device=ids.device
        )
        padded[:, : ids.shape[1]] = ids  # right padding with the pad id, which the runner also used
        return {"input_ids": padded}


def _pooled(features: Any) -> torch.Tensor:
    # transformers 5 returns a model output whose pooler_output is the projected vector; 4.x a tensor.
    return features if isinstance(features, torch.Tensor) else features.pooler_output
