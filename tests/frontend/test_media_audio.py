"""Audio decoding in the frontend: formats, mono mix, resampling, the length limit, windows."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from sie.errors import InvalidInput
from sie.frontend.media.audio import decode_audio, windows
from sie.media_config import AudioSpec
from tests import media_samples as samples

SPEC = AudioSpec(sampling_rate=16000, n_samples=16000 * 30)


@pytest.mark.parametrize(
    ("fmt", "subtype", "atol"),
    [("WAV", "FLOAT", 0.0), ("WAV", "PCM_16", 1e-4), ("FLAC", None, 1e-4), ("OGG", "VORBIS", 0.05)],
)
def test_formats_decode_to_the_same_samples(fmt: str, subtype: str | None, atol: float) -> None:
    clip = samples.tone(1.5, 16000)
    audio = decode_audio(
        samples.audio_bytes(clip, 16000, fmt, subtype), fmt.lower(), SPEC, 600, "Item 0 audio"
    )
    assert audio.samples.dtype == np.float32 and audio.sampling_rate == 16000
    assert abs(len(audio.samples) - len(clip)) <= 0.01 * len(clip)  # Vorbis may pad its last frame
    n = min(len(clip), len(audio.samples))
    np.testing.assert_allclose(audio.samples[:n], clip[:n], atol=atol)
    assert audio.duration_ms == round(len(audio.samples) / 16)


def test_stereo_is_mixed_to_mono() -> None:
    stereo = samples.tone(1.0, 16000, channels=2)
    audio = decode_audio(samples.audio_bytes(stereo, 16000, "WAV", "FLOAT"), None, SPEC, 600, "x")
    np.testing.assert_allclose(audio.samples, stereo.mean(axis=1), atol=1e-7)


def test_other_rates_are_resampled_with_soxr() -> None:
    clip = samples.tone(2.0, 44100, freq=1000.0)
    audio = decode_audio(samples.audio_bytes(clip, 44100, "WAV", "FLOAT"), "wav", SPEC, 600, "x")
    np.testing.assert_allclose(audio.samples, soxr.resample(clip, 44100, 16000), atol=1e-6)
    assert len(audio.samples) == 32000 and audio.duration_ms == 2000
    # Still a 1 kHz tone: the spectrum peaks at 1000 Hz.
    spectrum = np.abs(np.fft.rfft(audio.samples))
    assert abs(np.argmax(spectrum) * 16000 / len(audio.samples) - 1000) < 2


def test_too_long_audio_is_refused_from_the_header() -> None:
    data = samples.audio_bytes(samples.tone(3.0, 8000), 8000, "FLAC")
    decode_audio(data, None, SPEC, 3.0, "x")
    with pytest.raises(InvalidInput, match=r"Item 4 audio: audio of 3.0 s is longer than 2.5 s"):
        decode_audio(data, None, SPEC, 2.5, "Item 4 audio")


@pytest.mark.parametrize(
    ("data", "declared", "message"),
    [
        (b"RIFF not really a wave file", None, "not decodable audio"),
        (samples.jpeg(8, 8), None, "not decodable audio"),
        (samples.audio_bytes(samples.tone(0.5, 16000), 16000), "m4a", "unsupported audio format 'm4a'"),
        (samples.audio_bytes(np.zeros(0, np.float32), 16000), None, "holds no samples"),
    ],
    ids=["garbage", "an-image", "declared-m4a", "empty"],
)
def test_bad_audio_is_invalid_input(data: bytes, declared: str | None, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        decode_audio(data, declared, SPEC, 600, "Item 0 audio")


def test_windows_cover_the_recording_in_order() -> None:
    recording = np.arange(70, dtype=np.float32)
    parts = windows(recording, 30)
    assert [len(p) for p in parts] == [30, 30, 10]
    np.testing.assert_array_equal(np.concatenate(parts), recording)
    assert len(windows(recording[:30], 30)) == 1


def test_messages_fit_an_eighth_of_the_ring() -> None:
    from sie.errors import InputTooLong
    from sie.frontend.media.submit import HEADER_ALLOWANCE, plan_messages

    ring = 8 << 20
    parts = plan_messages(100, 12_288, ring)  # 64x64 RGB images
    per_message = (ring // 8 - HEADER_ALLOWANCE) // 12_288
    assert [p.stop - p.start for p in parts[:-1]] == [per_message] * (len(parts) - 1)
    assert parts[0].start == 0 and parts[-1].stop == 100
    assert len(plan_messages(3, 2_000_000, ring)) == 3  # one window a message when one is large
    with pytest.raises(InputTooLong, match="raise --request-ring-bytes"):
        plan_messages(1, ring, ring)
