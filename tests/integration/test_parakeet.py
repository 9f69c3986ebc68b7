"""Speech to text with a tiny Parakeet-TDT end to end on the media server, against transformers'
`generate` and ParakeetProcessor on the same audio and weights (piece by piece past 30 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import media_samples as samples
from tests.integration.media_models import MAX_AUDIO_S, PARAKEET
from tests.integration.server import Server
from tests.integration.test_media_extract import audio_item, extract, extracted

pytestmark = pytest.mark.slow

RATE = 16000
FRAME_S = 0.08
SHORT = (np.random.default_rng(3).standard_normal(RATE * 4) * 0.3).astype(np.float32)
# 36 s of noise with a silent 0.3 s at 26 s: the first piece ends mid-way through its first
# silent 100 ms frame (all silent frames tie; the first wins), at 26.05 s.
LONG = (np.random.default_rng(4).standard_normal(RATE * 36) * 0.3).astype(np.float32)
LONG[26 * RATE : int(26.3 * RATE)] = 0.0
CUT = int(26.05 * RATE)
# Clips the tiny model transcribes as nothing, but as something with 0.25 s of silence after them
# (the first), or only with 0.25 s on both sides (the second).
QUIET = [(np.random.default_rng(2).standard_normal(RATE) * amp).astype(np.float32) for amp in (0.01, 0.05)]
SILENCE = np.zeros(RATE // 4, np.float32)

Media = tuple[Server, dict[str, Path]]


class ParakeetReference:
    """generate() on each piece, as transformers users call it; text and token times from the
    processor (its TDT timestamp decoding)."""

    def __init__(self, folder: Path) -> None:
        import transformers

        self.model: Any = transformers.ParakeetForTDT.from_pretrained(folder).eval()
        self.processor: Any = transformers.AutoProcessor.from_pretrained(folder)

    def piece(self, samples_: np.ndarray) -> tuple[str, list[dict[str, Any]]]:
        import torch

        inputs = self.processor(audio=[samples_], sampling_rate=RATE, return_tensors="pt")
        with torch.no_grad():
            frames = self.model.get_audio_features(**inputs, output_attention_mask=True).attention_mask.sum()
            out = self.model.generate(**inputs, max_new_tokens=10 * int(frames))
        steps = self._valid_steps(out.sequences[0, 1:].tolist(), out.durations[0, 1:].tolist(), int(frames))
        ids = [token for token, _ in steps if token != self.model.config.blank_token_id]
        text = self.processor.batch_decode([ids], skip_special_tokens=True)[0].strip()
        _, [offsets] = self.processor.decode(
            torch.tensor([[t for t, _ in steps]]), durations=torch.tensor([[d for _, d in steps]])
        )
        return text, offsets

    @staticmethod
    def _valid_steps(tokens: list[int], durations: list[int], frames: int) -> list[tuple[int, int]]:
        """The steps before the piece's frames ran out (after that generate only pads)."""
        steps, frame = [], 0
        for token, duration in zip(tokens, durations, strict=True):
            if frame >= frames:
                break
            steps.append((token, duration))
            frame += duration
        return steps


@pytest.fixture(scope="module")
def reference(media: Media) -> ParakeetReference:
    return ParakeetReference(media[1][PARAKEET])


def test_transcripts_match_generate_piece_by_piece(media: Media, reference: ParakeetReference) -> None:
    server, _ = media
    items = [audio_item(samples.audio_bytes(clip, RATE, "WAV", "FLOAT"), "wav") for clip in (SHORT, LONG)]
    short, long = (entry["data"] for entry in extracted(server.url, PARAKEET, items))
    assert short == {"text": reference.piece(SHORT)[0], "language": None, "duration_ms": 4000}
    pieces = [reference.piece(LONG[:CUT])[0], reference.piece(LONG[CUT:])[0]]
    assert all(pieces) and long["text"] == " ".join(pieces)
    assert long["duration_ms"] == 36000 and "words" not in long and "segments" not in long


def test_words_and_segments_follow_their_piece(media: Media, reference: ParakeetReference) -> None:
    server, _ = media
    item = audio_item(samples.audio_bytes(LONG, RATE, "WAV", "FLOAT"), "wav")
    [entry] = extracted(
        server.url, PARAKEET, [item], options={"timestamp_granularities": ["word", "segment"]}
    )
    data = entry["data"]
    words, segments = data["words"], data["segments"]
    assert " ".join(w["word"] for w in words) == " ".join(data["text"].split())
    assert [s["id"] for s in segments] == list(range(len(segments)))
    assert " ".join(s["text"] for s in segments) == " ".join(w["word"] for w in words)
    second = [w for w in words if w["start"] >= CUT / RATE]
    # Each piece's first word starts at its first timed token, shifted to where the piece starts.
    for offsets, start_s, first in [
        (reference.piece(LONG[:CUT])[1], 0.0, words[0]),
        (reference.piece(LONG[CUT:])[1], CUT / RATE, second[0]),
    ]:
        assert first["start"] == pytest.approx(round(offsets[0]["start"] + start_s, 3), abs=1e-6)
    assert all(a["start"] <= a["end"] <= 36.0 for a in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)


def test_an_empty_ending_is_decoded_again_with_silence_around_it(
    media: Media, reference: ParakeetReference
) -> None:
    server, _ = media
    items = [audio_item(samples.audio_bytes(clip, RATE, "WAV", "FLOAT"), "wav") for clip in QUIET]
    options = {"timestamp_granularities": ["word"]}
    after, around = (entry["data"] for entry in extracted(server.url, PARAKEET, items, options=options))
    assert [reference.piece(clip)[0] for clip in QUIET] == ["", ""]
    assert reference.piece(np.concatenate([QUIET[1], SILENCE]))[0] == ""
    assert after["text"] == reference.piece(np.concatenate([QUIET[0], SILENCE]))[0] != ""
    text, offsets = reference.piece(np.concatenate([SILENCE, QUIET[1], SILENCE]))
    assert around["text"] == text != ""
    # Times are the padded piece's less the silence before it, kept within the recording.
    assert around["words"][0]["start"] == round(min(max(offsets[0]["start"] - 0.25, 0.0), 1.0), 3)
    assert all(0.0 <= w["start"] <= w["end"] <= 1.0 for w in around["words"])


def test_a_named_language_is_accepted_and_not_reported(media: Media) -> None:
    server, _ = media
    item = audio_item(samples.audio_bytes(SHORT, RATE), "wav")
    [entry] = extracted(server.url, PARAKEET, [item], options={"language": "de", "temperature": 0})
    assert entry["data"]["language"] is None and entry["data"]["text"]


@pytest.mark.parametrize(
    ("item", "params", "message"),
    [
        ({"text": "hello"}, {}, "Item 0 has text, which model"),
        (audio_item(b"not audio"), {}, "Item 0 audio: the bytes are not decodable audio"),
        (
            audio_item(samples.audio_bytes(samples.tone(MAX_AUDIO_S + 5, 8000), 8000, "FLAC")),
            {},
            f"longer than {MAX_AUDIO_S} s",
        ),
        (audio_item(samples.audio_bytes(SHORT, RATE)), {"labels": ["x"]}, "take no params.labels"),
        (
            audio_item(samples.audio_bytes(SHORT, RATE)),
            {"options": {"language": "zh"}},
            "Unsupported language",
        ),
        (audio_item(samples.audio_bytes(SHORT, RATE)), {"options": {"temperature": 0.4}}, "decodes greedily"),
    ],
    ids=["text", "undecodable", "too-long", "labels", "language", "temperature"],
)
def test_bad_input_is_a_400(media: Media, item: dict[str, Any], params: dict[str, Any], message: str) -> None:
    server, _ = media
    response = extract(server.url, PARAKEET, [item], **params)
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"]["message"]


def test_sdk_extract_transcribes_an_audio_file(
    media: Media, reference: ParakeetReference, tmp_path: Path
) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, _ = media
    clip = tmp_path / "clip.wav"
    clip.write_bytes(samples.audio_bytes(SHORT, RATE, "WAV", "FLOAT"))
    action = {"op": "extract", "model": PARAKEET, "items": {"audio": {"path": str(clip)}}}
    [entry] = run_sdk(server.url, [action])
    text = reference.piece(SHORT)[0]
    assert text and ok(entry)["data"] == {"text": text, "language": None, "duration_ms": 4000}
