"""The extract task for Parakeet-TDT: a transcript per audio item, with segment and word timestamps
when `options.timestamp_granularities` asks (the shape Whisper's transcripts have here).

Audio is decoded and resampled here, then cut at pauses into pieces of at most 30 s
(`media.pauses`); each piece is one device item, and an item's text joins its pieces' texts with
spaces, their times shifted to where each piece starts. The model names no language and cannot be
steered to one: `language` is accepted when it is one of the 25 it transcribes and has no effect,
and the response says `language: null`. It decodes greedily: `temperature` may only be 0.

A trained Parakeet now and then returns nothing for a short, tightly cut clip of speech, so an
item whose last piece decodes to nothing has that piece decoded again, first with 0.25 s of silence
after it, then with 0.25 s on both sides (SIE's recovery; the padding is never in the first pass).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.media.audio import Audio, decode_audio
from sie.frontend.media.pauses import pause_cuts
from sie.frontend.media.submit import Prepared, submit_units
from sie.frontend.parakeet import ParakeetVocab, TimedToken, segments_of, shifted, words_of
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob
from sie.media_config import AudioSpec, read_preprocessor_config
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

OPTIONS = frozenset({"language", "temperature", "timestamp_granularities", "profile"})
GRANULARITIES = frozenset({"segment", "word"})
# ISO 639-1 codes of the languages parakeet-tdt-0.6b-v3 was trained to transcribe.
LANGUAGES = frozenset(
    {
        *("bg", "cs", "da", "de", "el", "en", "es", "et", "fi", "fr", "hr", "hu", "it"),
        *("lt", "lv", "mt", "nl", "pl", "pt", "ro", "ru", "sk", "sl", "sv", "uk"),
    }
)
RETRY_PADDING_S = ((0.0, 0.25), (0.25, 0.25))  # (before, after) seconds of silence, tried in order


@dataclass(frozen=True, slots=True)
class ParakeetAudio:
    spec: AudioSpec
    min_samples: int  # the feature extractor normalizes over frames: a piece needs two of them

    @classmethod
    def from_folder(cls, folder: Path) -> ParakeetAudio:
        raw = read_preprocessor_config(folder) or _nested_feature_extractor(folder)
        rate = int(raw.get("sampling_rate", 16000))
        return cls(AudioSpec(rate, round(rate * 30.0)), 2 * int(raw.get("hop_length", 160)))


@dataclass(frozen=True, slots=True)
class Piece:
    item: int
    start: int  # where the piece starts in its recording (samples)
    samples: np.ndarray  # what the device decodes: the piece, with silence around it on a retry
    lead_s: float = 0.0  # seconds of silence before it, taken off its times


@dataclass(frozen=True, slots=True)
class Decoded:
    ids: list[int]
    times: list[tuple[float, float]]  # (start, end) seconds per id; empty unless timestamps were asked


def parakeet_options(job: ExtractJob) -> frozenset[str]:
    """The timestamp granularities asked for, after checking every option; each problem is a 400."""
    if job.labels:
        raise InvalidInput("Speech-to-text models take no params.labels")
    if job.instruction is not None and job.instruction.strip():
        raise InvalidInput("This model does not accept a prompt (instruction); omit it")
    options = job.options
    unknown = set(options) - OPTIONS
    if unknown:
        raise InvalidInput(f"Unsupported options for speech to text: {', '.join(sorted(unknown))}")
    language = options.get("language")
    if language is not None and (not isinstance(language, str) or language.strip().lower() not in LANGUAGES):
        raise InvalidInput(
            f"Unsupported language {language!r}: this model transcribes {', '.join(sorted(LANGUAGES))} "
            "(ISO 639-1 codes) and identifies the spoken one itself, so language may be omitted"
        )
    temperature = options.get("temperature")
    if temperature is not None and (isinstance(temperature, bool) or temperature != 0):
        raise InvalidInput("This model decodes greedily; options.temperature must be 0 or omitted")
    asked = options.get("timestamp_granularities") or []
    if (
        not isinstance(asked, list)
        or not all(isinstance(a, str) for a in asked)
        or not set(asked) <= GRANULARITIES
    ):
        raise InvalidInput("options.timestamp_granularities must be a list of 'segment' and/or 'word'")
    return frozenset(asked)


async def transcribe_parakeet(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    granularities = parakeet_options(job)
    vocab = state.tokenizers.derived(
        config, "parakeet", lambda tok: ParakeetVocab.from_folder(tok.raw, resolve_weights_dir(config))
    )
    audio = state.tokenizers.built(
        config, "parakeet-audio", lambda: ParakeetAudio.from_folder(resolve_weights_dir(config))
    )
    started = time.perf_counter()
    cut = await state.media.run(_decode_and_cut, job.items, audio.spec, state.settings.max_audio_seconds)
    decode_ms = (time.perf_counter() - started) * 1000
    audios = [recording for recording, _ in cut]
    pieces = [
        Piece(i, start, recording.samples[start:end])
        for i, (recording, spans) in enumerate(cut)
        for start, end in spans
    ]
    admit(state, target, len(pieces))
    slot = target.slot
    device = _Device(state, slot, bool(granularities), config_key(target.profile_name))
    decoded = await device.decode(pieces)
    await _retry_empty_endings(device, vocab, audio, pieces, decoded)
    per_item: list[list[tuple[Piece, Decoded]]] = [[] for _ in audios]
    for piece, result in zip(pieces, decoded, strict=True):
        per_item[piece.item].append((piece, result))
    rate = audio.spec.sampling_rate
    data = [_transcript(vocab, a, rate, p, granularities) for a, p in zip(audios, per_item, strict=True)]
    n = len(job.items)
    return Extracted(
        entities=[[] for _ in range(n)],
        classifications=[[] for _ in range(n)],
        data=data,
        tokenization_ms=decode_ms + device.prepare_ms,
        queue_ms=device.queue_ms,
        inference_ms=device.inference_ms,
    )


@dataclass(slots=True)
class _Device:
    """Submits pieces for one request and adds up the stage timings of every pass."""

    state: FrontendState
    slot: int
    timed: bool
    key: int
    prepare_ms: float = 0.0
    queue_ms: float = 0.0
    inference_ms: float = 0.0

    async def decode(self, pieces: Sequence[Piece]) -> list[Decoded]:
        kinds = {ResultKind.TOKENS} | ({ResultKind.TOKEN_TIMES} if self.timed else set())

        def prepare(part: Sequence[Piece]) -> Prepared:
            return Prepared(_request(part, self.slot, kinds, self.key), [None] * len(part))

        unit_bytes = 4 * max(len(p.samples) for p in pieces)
        submitted = await submit_units(self.state, pieces, unit_bytes, prepare)
        self.prepare_ms += submitted.prepare_ms
        self.queue_ms = max(self.queue_ms, submitted.queue_ms)
        self.inference_ms += submitted.inference_ms
        parts = [results.ragged for results, _ in submitted.parts]
        ids = [row.reshape(-1).astype(np.int64).tolist() for part in parts for row in part[ResultKind.TOKENS]]
        if not self.timed:
            return [Decoded(row, []) for row in ids]
        times = [row.reshape(-1, 2).tolist() for part in parts for row in part[ResultKind.TOKEN_TIMES]]
        return [Decoded(row, [(a, b) for a, b in t]) for row, t in zip(ids, times, strict=True)]


async def _retry_empty_endings(
    device: _Device, vocab: ParakeetVocab, audio: ParakeetAudio, pieces: list[Piece], decoded: list[Decoded]
) -> None:
    """Decode each item's last piece again with silence around it while it decodes to nothing."""
    last = {piece.item: k for k, piece in enumerate(pieces)}
    rate = audio.spec.sampling_rate
    for before_s, after_s in RETRY_PADDING_S:
        empty = [
            k
            for k in last.values()
            if len(pieces[k].samples) >= audio.min_samples and not vocab.text(decoded[k].ids)
        ]
        if not empty:
            return
        padded = [_padded(pieces[k], rate, before_s, after_s) for k in empty]
        for k, piece, again in zip(empty, padded, await device.decode(padded), strict=True):
            if vocab.text(again.ids):
                pieces[k], decoded[k] = piece, again


def _padded(piece: Piece, rate: int, before_s: float, after_s: float) -> Piece:
    before, after = np.zeros(round(before_s * rate), np.float32), np.zeros(round(after_s * rate), np.float32)
    return replace(piece, samples=np.concatenate([before, piece.samples, after]), lead_s=before_s)


def _transcript(
    vocab: ParakeetVocab,
    recording: Audio,
    rate: int,
    decoded: list[tuple[Piece, Decoded]],
    granularities: frozenset[str],
) -> dict[str, Any]:
    """One item's response from its pieces, in order: texts joined, times shifted per piece."""
    texts = [vocab.text(d.ids) for _, d in decoded]
    data: dict[str, Any] = {
        "text": " ".join(text for text in texts if text),
        "language": None,
        "duration_ms": recording.duration_ms,
    }
    if not granularities:
        return data
    starts_s = [piece.start / rate for piece, _ in decoded]
    ends_s = [*starts_s[1:], len(recording.samples) / rate]
    words: list[dict[str, Any]] = []
    for (piece, d), text, start_s, end_s in zip(decoded, texts, starts_s, ends_s, strict=True):
        tokens: list[TimedToken] = vocab.timed_tokens(d.ids, d.times) if text else []
        # A piece's words are merged from its own tokens: a piece boundary is a word boundary.
        words.extend(words_of(shifted(tokens, start_s - piece.lead_s, start_s, end_s)))
    if "word" in granularities:
        data["words"] = words
    if "segment" in granularities:
        data["segments"] = segments_of(words)
    return data


def _decode_and_cut(
    items: Sequence[Any], spec: AudioSpec, max_seconds: float
) -> list[tuple[Audio, list[tuple[int, int]]]]:
    """Each item's audio and its pieces' sample spans (on a media worker thread)."""
    out = []
    for i, item in enumerate(items):
        recording = decode_audio(item.audio.data, item.audio.format, spec, max_seconds, f"Item {i} audio")
        out.append((recording, pause_cuts(recording.samples, spec.sampling_rate)))
    return out


def _request(part: Sequence[Piece], slot: int, kinds: set[ResultKind], key: int) -> TokenBatch:
    n = len(part)
    sample_offsets = np.zeros(n + 1, np.int32)
    np.cumsum([len(p.samples) for p in part], out=sample_offsets[1:])
    return TokenBatch(
        req_id=0,
        op=Op.EXTRACT,
        model_slot=slot,
        offsets=np.zeros(n + 1, np.int32),  # a piece brings no tokens, only its samples
        input_ids=np.zeros(0, np.int32),
        output_mask=mask_of(kinds),
        config_key=key,
        samples=np.concatenate([p.samples for p in part]),
        sample_offsets=sample_offsets,
    )


def _nested_feature_extractor(folder: Path) -> dict[str, Any]:
    """The feature extractor's settings inside processor_config.json (where a ParakeetProcessor
    saved without a separate preprocessor_config.json keeps them)."""
    path = folder / "processor_config.json"
    raw = json.loads(path.read_text()) if path.is_file() else {}
    nested = raw.get("feature_extractor") if isinstance(raw, dict) else None
    return nested if isinstance(nested, dict) else {}
