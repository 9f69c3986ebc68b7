"""Donut: a batch of page images, each with its task prompt -> the generated token ids.

The decoding is `transformers`' `VisionEncoderDecoderModel.generate`, called as SIE calls it:
greedy, the tokenizer's pad and end ids, the unknown token banned, at most the request's
`max_new_tokens` (the batch's scalar) new tokens, and the model's generation config for the rest.
Prompts of one length run as one `generate` on their stacked pages (one encoder pass, batched
decoder steps); prompts of other lengths run apart, as right-padding a prompt would shift the
decoder's learned positions. A generation never runs past the decoder's positions.

Pages arrive as uint8, already aligned, resized and padded to the processor's size by the
frontend; here they are rescaled and normalized. Each item gets back its new tokens up to and
including the end token; decoding them and token2json are the frontend's.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.gpu_proc.adapters.common import HeldModel, load_model
from sie.gpu_proc.outputs import Output, ragged
from sie.media_config import ImageSpec, channel_triple
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

# Pages per `generate`: a full-size page (2560 x 1920) costs the Swin encoder much activation memory.
MAX_PAGES_PER_GENERATE = 4


class DonutAdapter(HeldModel):
    kinds = frozenset({ResultKind.TOKENS})

    def __init__(
        self, model: PreTrainedModel, normalizer: PixelNormalizer, special: dict[str, int], *, name: str
    ) -> None:
        super().__init__(model, name=name)
        self._normalizer = normalizer
        self.pad_token_id = special["pad"]
        self._eos = special["eos"]
        self._unk = special["unk"]
        self._max_positions = int(model.config.decoder.max_position_embeddings)

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> DonutAdapter:
        from transformers import AutoTokenizer, DonutImageProcessorPil, VisionEncoderDecoderModel

        model = load_model(VisionEncoderDecoderModel, config, weights_dir, device, profile)
        tokenizer = AutoTokenizer.from_pretrained(weights_dir, local_files_only=True)
        special = {
            "pad": tokenizer.pad_token_id,
            "eos": tokenizer.eos_token_id,
            "unk": tokenizer.unk_token_id,
        }
        # The PIL processor, whose pages the frontend makes (the torchvision one resizes otherwise).
        processor = DonutImageProcessorPil.from_pretrained(weights_dir, local_files_only=True)
        return cls(model, PixelNormalizer(pixel_spec(processor), model.device), special, name=config.sie_id)

    def lora_target(self) -> torch.nn.Module | None:
        return None  # LoRA adapters are not served for Donut

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model: Any = self._live()
        assert inputs.pixels is not None  # every item is a page with its prompt
        prompts = [inputs.input_ids[i, :n] for i, n in enumerate(inputs.lengths)]
        by_length: dict[int, list[int]] = defaultdict(list)
        for i, n in enumerate(inputs.lengths):
            by_length[n].append(i)
        tokens: list[np.ndarray] = [np.zeros((0, 1), np.float32)] * len(prompts)
        with torch.inference_mode():
            for length, members in by_length.items():
                budget = min(int(inputs.scalar), self._max_positions - length)
                for start in range(0, len(members), MAX_PAGES_PER_GENERATE):
                    part = members[start : start + MAX_PAGES_PER_GENERATE]
                    rows = self._generate(
                        model, inputs.pixels[part], torch.stack([prompts[i] for i in part]), budget
                    )
                    for i, row in zip(part, rows, strict=True):
                        tokens[i] = np.asarray(row, np.float32).reshape(-1, 1)
        return {ResultKind.TOKENS: ragged(ResultKind.TOKENS, tokens)}

    def _generate(
        self, model: Any, pages: torch.Tensor, prompts: torch.Tensor, budget: int
    ) -> list[list[int]]:
        """Each page's new tokens, through its end token (a finished row's padding dropped)."""
        length = prompts.shape[1]
        if budget <= 0:
            return [[] for _ in range(len(prompts))]
        sequences = model.generate(
            self._normalizer(pages, self.dtype),
            decoder_input_ids=prompts,
            max_new_tokens=budget,
            pad_token_id=self.pad_token_id,
            eos_token_id=self._eos,
            use_cache=True,
            bad_words_ids=[[self._unk]],
            num_beams=1,
        )
        return [_through_end(row[length:], self._eos) for row in sequences.tolist()]


def _through_end(row: list[int], eos: int) -> list[int]:
    """The generated tokens up to and including the first end token (all of them when none)."""
    return row[: row.index(eos) + 1] if eos in row else row


def pixel_spec(processor: Any) -> ImageSpec:
    """What the normalizer reads (rescale, mean, std) from the model's own image processor."""
    size = processor.size
    return ImageSpec(
        kind="square",
        height=int(size.height if hasattr(size, "height") else size["height"]),
        width=int(size.width if hasattr(size, "width") else size["width"]),
        shortest_edge=None,
        resample=int(processor.resample),
        do_resize=bool(processor.do_resize),
        do_center_crop=False,
        rescale_factor=float(processor.rescale_factor) if processor.do_rescale else 1.0,
        do_normalize=bool(processor.do_normalize),
        mean=channel_triple(processor.image_mean),
        std=channel_triple(processor.image_std),
    )
