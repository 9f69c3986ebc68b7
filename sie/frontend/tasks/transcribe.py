"""The extract task for audio (Whisper): a transcript per item, with segment and word timestamps
when `options.timestamp_granularities` asks (the OpenAI transcription convention SIE follows).

Audio is decoded and resampled here, then cut into the model's 30 s windows; each window is one
device item (cost 1) and the windows of one recording are joined back in order, their times
shifted by the window's start. Options: `language` (ISO 639-1, e.g. "en"; detected per window
when absent), `temperature` (0 greedy, else sampling), `timestamp_granularities` ["segment",
"word"]. Windows with different options never share a device batch (their config key differs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.media.audio import Audio, decode_audio, windows
from sie.frontend.media.submit import Prepared, submit_units
from sie.frontend.pipeline import admit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob
from sie.frontend.transcripts import WhisperVocab
from sie.frontend.wire import option_fraction
from sie.media_config import AudioSpec, audio_spec
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

OPTIONS = frozenset({"language", "temperature", "timestamp_granularities", "profile"})
GRANULARITIES = frozenset({"segment", "word"})


@dataclass(frozen=True, slots=True)
class TranscribeOptions:
    language: str | None = None
    temperature: float = 0.0
    segments: bool = False
    words: bool = False


@dataclass(frozen=True, slots=True)
class Window:
    item: int
    index: int  # its position in the recording: it starts at index * window_s
    samples: np.ndarray


def transcribe_options(options: dict[str, Any], labels: list[str] | None) -> TranscribeOptions:
    """The request's options, checked; every problem is a 400."""
    if labels:
        raise InvalidInput("Speech-to-text models take no params.labels")
    unknown = set(options) - OPTIONS
    if unknown:
        raise InvalidInput(f"Unsupported options for speech to text: {', '.join(sorted(unknown))}")
    language = options.get("language")
    if language is not None and (not isinstance(language, str) or not language.strip()):
        raise InvalidInput("options.language must be a language code such as 'en'")
    temperature = option_fraction("temperature", options.get("temperature", 0.0))
    asked = options.get("timestamp_granularities") or []
    if not isinstance(asked, list) or not set(asked) <= GRANULARITIES:
        raise InvalidInput("options.timestamp_granularities must be a list of 'segment' and/or 'word'")
    code = language.strip().lower() if isinstance(language, str) else None
    return TranscribeOptions(code, float(temperature), "segment" in asked, "word" in asked)


async def transcribe(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    options = transcribe_options(job.options, job.labels)
    vocab = state.tokenizers.derived(config, "whisper", lambda tok: WhisperVocab.from_tokenizer(tok.raw))
    spec = state.tokenizers.built(config, "audio-spec", lambda: audio_spec(resolve_weights_dir(config)))
    prompt = _prompt(vocab, options)
    started = time.perf_counter()
    audios = await state.media.run(_decode_all, job.items, spec, state.settings.max_audio_seconds)
    decode_ms = (time.perf_counter() - started) * 1000
    units = [
        Window(i, w, samples)
        for i, audio in enumerate(audios)
        for w, samples in enumerate(windows(audio.samples, spec.n_samples))
    ]
    admit(state, target, len(units))
    slot = target.slot
    kinds = {ResultKind.TOKENS} | ({ResultKind.TOKEN_TIMES} if options.words else set())
    key = config_key(target.profile_name, *map(str, prompt), f"t={options.temperature}")

    def prepare(part: Sequence[Window]) -> Prepared:
        return Prepared(_request(part, prompt, slot, kinds, key, options.temperature), [None] * len(part))

    submitted = await submit_units(state, units, spec.n_samples * 4, prepare)
    tokens = [ids for results, _ in submitted.parts for ids in results.ragged[ResultKind.TOKENS]]
    times = [t for results, _ in submitted.parts for t in results.ragged.get(ResultKind.TOKEN_TIMES, [])]
    data = _transcripts(vocab, spec, audios, units, tokens, times, options)
    n = len(job.items)
    return Extracted(
        entities=[[] for _ in range(n)],
        classifications=[[] for _ in range(n)],
        data=data,
        tokenization_ms=decode_ms + submitted.prepare_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def _prompt(vocab: WhisperVocab, options: TranscribeOptions) -> list[int]:
    """What the device reads its generation options from: the named language, and no-timestamps
    unless timestamps are wanted (the model's generation config decides the rest)."""
    prompt = [vocab.start]
    if options.language is not None:
        if options.language not in vocab.languages:
            raise InvalidInput(f"Unsupported language '{options.language}' for this model")
        prompt.append(vocab.languages[options.language])
    if not (options.segments or options.words):
        prompt.append(vocab.no_timestamps)
    return prompt


def _decode_all(items: Sequence[Any], spec: AudioSpec, max_seconds: float) -> list[Audio]:
    return [
        decode_audio(item.audio.data, item.audio.format, spec, max_seconds, f"Item {i} audio")
        for i, item in enumerate(items)
    ]


def _request(
    part: Sequence[Window], prompt: list[int], slot: int, kinds: set[ResultKind], key: int, temperature: float
) -> TokenBatch:
    n = len(part)
    lengths = np.fromiter((len(w.samples) for w in part), np.int64, n)
    sample_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=sample_offsets[1:])
    return TokenBatch(
        req_id=0,
        op=Op.EXTRACT,
        model_slot=slot,
        offsets=(np.arange(n + 1) * len(prompt)).astype(np.int32),
        input_ids=np.tile(np.asarray(prompt, np.int32), n),
        output_mask=mask_of(kinds),
        config_key=key,
        samples=np.concatenate([w.samples for w in part]),
        sample_offsets=sample_offsets,
        scalar=temperature,
    )


def _transcripts(
    vocab: WhisperVocab,
    spec: AudioSpec,
    audios: list[Audio],
    units: list[Window],
    tokens: list[np.ndarray],
    times: list[np.ndarray],
    options: TranscribeOptions,
) -> list[dict[str, Any]]:
    """Per item: the windows' text joined, the first window's language, times shifted per window."""
    data: list[dict[str, Any]] = [
        {"text": "", "language": None, "duration_ms": a.duration_ms} for a in audios
    ]
    segments: list[list[dict[str, Any]]] = [[] for _ in audios]
    words: list[list[dict[str, Any]]] = [[] for _ in audios]
    for n, unit in enumerate(units):
        ids = tokens[n][:, 0].astype(np.int64).tolist()
        language, generated = ids[0], ids[1:]
        entry, offset_s = data[unit.item], unit.index * spec.window_s
        entry["text"] += vocab.text(generated)
        entry["language"] = entry["language"] or vocab.language_of(language)
        if options.segments:
            segments[unit.item].extend(vocab.segments(generated, offset_s))
        if options.words:
            words[unit.item].extend(vocab.words(generated, times[n][1:, 0].tolist(), offset_s))
    for i, entry in enumerate(data):
        if options.segments:
            entry["segments"] = [{"id": k, **segment} for k, segment in enumerate(segments[i])]
        if options.words:
            entry["words"] = words[i]
    return data
