"""Whisper speech to text: a batch of audio windows -> generated token ids (and token times).

The decoding is `transformers`' own `WhisperForConditionalGeneration.generate` on the whole batch:
one encoder pass and batched decoder steps, the same tokens as calling it directly, and the
timestamp rules, suppressions and fallbacks of the model's generation config for free. It runs on
the inference thread, so the device loop keeps beating while a generation runs.

Log-mel features are computed here, not in the frontend: transformers computes them with torch
when torch is present (so this matches the reference bit for bit, where the frontend's numpy would
differ in the last bits), a batched STFT is cheap next to the encoder (free on a GPU), and the
ring carries plain samples. Each window's prompt tokens (from the frontend) say the language, if
the request named one, and whether timestamp tokens are wanted; everything else is the model's
generation config, as in a plain `generate(features, attention_mask=...)` call.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import HeldModel, load_model, without_padding
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig


class WhisperAdapter(HeldModel):
    kinds = frozenset({ResultKind.TOKENS, ResultKind.TOKEN_TIMES})

    def __init__(self, model: PreTrainedModel, features: Any, *, name: str) -> None:
        super().__init__(model, name=name)
        generation = model.generation_config
        self.pad_token_id = int(generation.pad_token_id)
        self._id_to_language = {int(i): token for token, i in (generation.lang_to_id or {}).items()}
        self._no_timestamps = int(generation.no_timestamps_token_id)
        self._features = features

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> WhisperAdapter:
        from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

        model = load_model(WhisperForConditionalGeneration, config, weights_dir, device, profile)
        features = WhisperFeatureExtractor.from_pretrained(weights_dir, local_files_only=True)
        return cls(model, features, name=config.sie_id)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        model = self._live()
        assert inputs.samples is not None  # the media path hands a Whisper batch its windows
        windows = [s.numpy() for s in inputs.samples]
        prompt = inputs.input_ids[0].tolist()[: inputs.lengths[0]]
        extracted = self._features(
            windows,
            sampling_rate=self._features.sampling_rate,
            return_attention_mask=True,
            return_tensors="pt",
            device=str(self.device),
        )
        features = extracted.input_features.to(self.device, self.dtype)
        mask = extracted.attention_mask.to(self.device)
        named = self._languages(model, prompt, features)
        with torch.inference_mode():
            generated = self._generate(model, features, mask, named, prompt, inputs.scalar, wanted)
            # With no language named, `generate` detected one per window and kept it to itself; this
            # repeats its detection (same features, same call) to report it.
            languages = named or [int(i) for i in model.detect_language(input_features=features).tolist()]
        return self._outputs(generated, languages, wanted)

    def _languages(self, model: Any, prompt: list[int], features: torch.Tensor) -> list[int] | None:
        """The language the request named (every window of a batch shares it), or None."""
        named = [token for token in prompt if token in self._id_to_language]
        return [named[0]] * len(features) if named else None

    def _generate(
        self,
        model: Any,
        features: torch.Tensor,
        mask: torch.Tensor,
        named: list[int] | None,
        prompt: list[int],
        temperature: float,
        wanted: frozenset[ResultKind],
    ) -> Any:
        extra: dict[str, Any] = {"temperature": temperature} if temperature > 0 else {}
        if named is not None:
            extra["language"] = [self._id_to_language[i] for i in named]
        if ResultKind.TOKEN_TIMES in wanted:
            extra["return_token_timestamps"] = True
        attention = model.config._attn_implementation
        try:
            return model.generate(
                features, attention_mask=mask, return_timestamps=self._no_timestamps not in prompt, **extra
            )
        finally:
            # Token timestamps switch the model to eager attention for good; switch it back.
            model.config._attn_implementation = attention

    def _outputs(
        self, generated: Any, languages: list[int], wanted: frozenset[ResultKind]
    ) -> dict[ResultKind, Output]:
        sequences = generated["sequences"] if isinstance(generated, dict) else generated
        rows = [without_padding(row, self.pad_token_id) for row in sequences.tolist()]
        tokens = [
            np.asarray([[lang], *[[t] for t in row]], np.float32).reshape(-1, 1)
            for lang, row in zip(languages, rows, strict=True)
        ]
        out = {ResultKind.TOKENS: ragged(ResultKind.TOKENS, tokens)}
        if ResultKind.TOKEN_TIMES in wanted:
            times = generated["token_timestamps"].float().cpu().numpy()
            out[ResultKind.TOKEN_TIMES] = ragged(
                ResultKind.TOKEN_TIMES,
                [
                    np.concatenate([[math.nan], times[i, : len(row)]]).astype(np.float32).reshape(-1, 1)
                    for i, row in enumerate(rows)
                ],
            )
        return out
