"""Audio bytes -> mono float32 samples at the model's rate, cut into the model's windows.

libsndfile (through `soundfile`) reads WAV, FLAC, OGG/Vorbis/Opus and MP3. The duration is read
from the header before any sample is decoded, so an over-long recording is refused before it
costs memory. Channels are averaged to mono and `soxr` resamples to the model's rate.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import soundfile
import soxr

from sie.errors import InvalidInput
from sie.media_config import AudioSpec

# What a request's `format` may say; the bytes decide what is actually decoded.
DECLARED_FORMATS = frozenset({"wav", "wave", "x-wav", "flac", "ogg", "oga", "opus", "mp3", "mpeg", "mpga"})


@dataclass(frozen=True, slots=True)
class Audio:
    samples: np.ndarray  # float32 mono at the model's rate
    sampling_rate: int

    @property
    def duration_ms(self) -> int:
        return round(len(self.samples) * 1000 / self.sampling_rate)


def decode_audio(data: bytes, declared: str | None, spec: AudioSpec, max_seconds: float, where: str) -> Audio:
    """Decode, check the length, mix to mono and resample; each failure is an InvalidInput."""
    if declared is not None and declared.lower() not in DECLARED_FORMATS:
        raise InvalidInput(f"{where}: unsupported audio format '{declared}' (supported: WAV, FLAC, OGG, MP3)")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            seconds = sound.frames / sound.samplerate
            if seconds > max_seconds:
                raise InvalidInput(f"{where}: audio of {seconds:.1f} s is longer than {max_seconds:g} s")
            rate = sound.samplerate
            frames = sound.read(dtype="float32", always_2d=True)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError):
        raise InvalidInput(f"{where}: the bytes are not decodable audio (WAV, FLAC, OGG, MP3)") from None
    if len(frames) == 0:
        raise InvalidInput(f"{where}: the audio holds no samples")
    mono = frames[:, 0] if frames.shape[1] == 1 else frames.mean(axis=1, dtype=np.float32)
    if rate != spec.sampling_rate:
        mono = soxr.resample(mono, rate, spec.sampling_rate)
    return Audio(np.ascontiguousarray(mono, np.float32), spec.sampling_rate)


def windows(samples: np.ndarray, n_samples: int) -> list[np.ndarray]:
    """Consecutive windows of at most `n_samples` (the last may be shorter); at least one."""
    if len(samples) <= n_samples:
        return [samples]
    return [samples[start : start + n_samples] for start in range(0, len(samples), n_samples)]
