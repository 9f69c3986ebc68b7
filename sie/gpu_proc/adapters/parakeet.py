"""Parakeet-TDT speech to text: a batch of audio pieces -> emitted token ids and their times.

The frontend cuts recordings into pieces of at most 30 s (at pauses) and sends each as one item;
this adapter computes their log-mel features with transformers' `ParakeetFeatureExtractor` (torch,
as for Whisper: the reference's own numbers, in the device process), runs the encoder and decodes greedily
(`tdt_greedy`). Rows are grouped by length so that no forward holds more than
`max_padded_batch_ms` of padded audio: encoder attention grows with the square of a row's length,
so a batch then needs no more memory than one recording of that length.

TOKENS rows are the emitted token ids; TOKEN_TIMES rows are (start, end) seconds of each token:
its frame and its frame plus its predicted duration, in encoder frames of hop * subsampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.common import HeldModel, load_model
from sie.gpu_proc.adapters.tdt_greedy import Emission, greedy_tdt
from sie.gpu_proc.outputs import Output, ragged
from sie.shm.layout import ResultKind

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from sie.model_config import ModelConfig

# SIE's cap on padded audio per encoder pass: one 12-minute recording's worth.
DEFAULT_MAX_PADDED_BATCH_MS = 12 * 60 * 1000


class ParakeetAdapter(HeldModel):
    kinds = frozenset({ResultKind.TOKENS, ResultKind.TOKEN_TIMES})
    pad_token_id = 0  # items carry no tokens besides their samples

    def __init__(self, model: PreTrainedModel, features: Any, *, name: str, max_padded_batch_ms: int) -> None:
        super().__init__(model, name=name)
        config: Any = model.config
        self._features = features
        self._rate = int(features.sampling_rate)
        # Feature normalization divides by (frames - 1): a piece needs at least two frames.
        self._min_samples = 2 * int(features.hop_length)
        self._max_padded_samples = max_padded_batch_ms * self._rate // 1000
        self._frame_s = features.hop_length / self._rate * int(config.encoder_config.subsampling_factor)
        self._blank = int(config.blank_token_id)
        self._vocab_size = int(config.vocab_size)
        self._durations = [int(d) for d in config.durations]

    @classmethod
    def load(
        cls, config: ModelConfig, weights_dir: Path, device: str, profile: str | None = None
    ) -> ParakeetAdapter:
        from transformers import ParakeetFeatureExtractor, ParakeetForTDT

        model = load_model(ParakeetForTDT, config, weights_dir, device, profile)
        features = ParakeetFeatureExtractor.from_pretrained(weights_dir, local_files_only=True)
        loadtime = config.profile(profile).adapter_options.loadtime
        budget = int(loadtime.get("max_padded_batch_ms") or DEFAULT_MAX_PADDED_BATCH_MS)
        return cls(model, features, name=config.sie_id, max_padded_batch_ms=budget)

    def forward(self, inputs: ForwardInputs, wanted: frozenset[ResultKind]) -> dict[ResultKind, Output]:
        assert inputs.samples is not None  # the media path hands a Parakeet batch its pieces
        pieces = [s.numpy() for s in inputs.samples]
        decoded: list[list[Emission]] = [[] for _ in pieces]
        # A piece too short to normalize holds no speech: it stays empty.
        usable = [i for i, piece in enumerate(pieces) if len(piece) >= self._min_samples]
        for group in length_groups([len(pieces[i]) for i in usable], self._max_padded_samples):
            rows = [usable[k] for k in group]
            for row, emissions in zip(rows, self.decode([pieces[r] for r in rows]), strict=True):
                decoded[row] = emissions
        return self._outputs(decoded, wanted)

    def decode(self, pieces: list[np.ndarray]) -> list[list[Emission]]:
        """Features, encoder and greedy decoding of one padded batch of pieces."""
        model: Any = self._live()
        # On the host: the extractor's STFT takes the waveform where its padding left it (the CPU).
        extracted = self._features(
            pieces, sampling_rate=self._rate, return_attention_mask=True, return_tensors="pt"
        )
        with torch.inference_mode():
            encoded = model.get_audio_features(
                input_features=extracted.input_features.to(self.device, self.dtype),
                attention_mask=extracted.attention_mask.to(self.device),
                output_attention_mask=True,
            )
            states = encoded.pooler_output
            lengths = encoded.attention_mask.sum(dim=-1)
            return greedy_tdt(
                model.decoder,
                model.joint,
                states,
                lengths,
                blank_id=self._blank,
                vocab_size=self._vocab_size,
                durations=self._durations,
            )

    def _outputs(
        self, decoded: list[list[Emission]], wanted: frozenset[ResultKind]
    ) -> dict[ResultKind, Output]:
        tokens = [np.asarray([e.token for e in row], np.float32).reshape(-1, 1) for row in decoded]
        out = {ResultKind.TOKENS: ragged(ResultKind.TOKENS, tokens)}
        if ResultKind.TOKEN_TIMES in wanted:
            times = [
                np.asarray(
                    [(e.frame * self._frame_s, (e.frame + e.duration) * self._frame_s) for e in row],
                    np.float32,
                ).reshape(-1, 2)
                for row in decoded
            ]
            out[ResultKind.TOKEN_TIMES] = ragged(ResultKind.TOKEN_TIMES, times)
        return out


def length_groups(lengths: Sequence[int], max_padded: int) -> list[list[int]]:
    """Positions grouped longest first so that each group's rows * longest row <= max_padded (a row
    longer than that on its own)."""
    groups: list[list[int]] = []
    for position in sorted(range(len(lengths)), key=lambda p: -lengths[p]):
        group = groups[-1] if groups else None
        if group is not None and (len(group) + 1) * lengths[group[0]] <= max_padded:
            group.append(position)
        else:
            groups.append([position])
    return groups
