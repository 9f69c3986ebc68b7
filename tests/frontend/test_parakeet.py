"""The frontend half of Parakeet transcripts against transformers' ParakeetProcessor on the same ids:
text, per-token times (with its punctuation refinement), then words, segments, pieces and options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.media.pauses import pause_cuts
from sie.frontend.parakeet import ParakeetVocab, TimedToken, segments_of, shifted, words_of
from sie.frontend.tasks.extract import ExtractJob
from sie.frontend.tasks.parakeet import ParakeetAudio, parakeet_options
from tests.tiny_models.parakeet import parakeet_vocab, write_parakeet_tokenizer

FRAME_S = 0.08
RATE = 16000


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import transformers

    folder = tmp_path_factory.mktemp("parakeet-tokenizer")
    tokenizer = write_parakeet_tokenizer(folder)
    features = transformers.ParakeetFeatureExtractor(feature_size=128)
    transformers.ParakeetProcessor(features, tokenizer, decoder_type="tdt").save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def processor(folder: Path) -> Any:
    import transformers

    return transformers.AutoProcessor.from_pretrained(folder)


@pytest.fixture(scope="module")
def vocab(folder: Path) -> ParakeetVocab:
    from tokenizers import Tokenizer

    return ParakeetVocab.from_folder(Tokenizer.from_file(str(folder / "tokenizer.json")), folder)


def decode_steps(seed: int, n: int = 60) -> tuple[list[int], list[int]]:
    """A decoder's steps: random tokens (blank half the time, pad, <s> and punctuation included)
    with random durations, as `generate` returns them."""
    rng = np.random.default_rng(seed)
    ids = parakeet_vocab()
    tokens = [
        ids["<blank>"] if rng.random() < 0.5 else int(rng.integers(0, ids["<blank>"])) for _ in range(n)
    ]
    durations = [int(rng.integers(0, 5)) or (1 if t == ids["<blank>"] else 0) for t in tokens]
    return tokens, durations


def emitted(tokens: list[int], durations: list[int]) -> tuple[list[int], list[tuple[float, float]]]:
    """What the device sends for those steps: non-blank ids and their (start, end) seconds."""
    blank, frame = parakeet_vocab()["<blank>"], 0
    ids, times = [], []
    for token, duration in zip(tokens, durations, strict=True):
        if token != blank:
            ids.append(token)
            times.append((frame * FRAME_S, (frame + duration) * FRAME_S))
        frame += duration
    return ids, times


@pytest.mark.parametrize("seed", range(6))
def test_text_equals_batch_decode(vocab: ParakeetVocab, processor: Any, seed: int) -> None:
    ids, _ = emitted(*decode_steps(seed))
    want = processor.batch_decode([ids], skip_special_tokens=True)[0].strip()
    assert vocab.text(ids) == want
    assert want  # the steps decode to some text


@pytest.mark.parametrize("seed", range(6))
def test_timed_tokens_equal_decode_with_durations(vocab: ParakeetVocab, processor: Any, seed: int) -> None:
    import torch

    tokens, durations = decode_steps(seed)
    _, [want] = processor.decode(
        torch.tensor([tokens]), durations=torch.tensor([durations]), skip_special_tokens=True
    )
    got = vocab.timed_tokens(*emitted(tokens, durations))
    assert [t.text for t in got] == [o["token"] for o in want]
    np.testing.assert_allclose(
        [(t.start, t.end) for t in got], [(o["start"], o["end"]) for o in want], atol=1e-9
    )
    assert any(t.text in ".,?" for t in got)  # the refinement ran


def test_words_join_tokens_at_spaces_and_segments_end_sentences() -> None:
    tokens = [
        TimedToken("He", 0.0, 0.1),
        TimedToken("llo", 0.1, 0.3),
        TimedToken(".", 0.3, 0.3),
        TimedToken(" you", 0.5, 0.7),
        TimedToken(" there", 0.8, 1.0000004),
    ]
    words = words_of(tokens)
    assert words == [
        {"word": "Hello.", "start": 0.0, "end": 0.3},
        {"word": "you", "start": 0.5, "end": 0.7},
        {"word": "there", "start": 0.8, "end": 1.0},
    ]
    assert segments_of(words) == [
        {"id": 0, "start": 0.0, "end": 0.3, "text": "Hello."},
        {"id": 1, "start": 0.5, "end": 1.0, "text": "you there"},
    ]


def test_a_segment_is_cut_after_30_seconds() -> None:
    words = [{"word": f"w{i}", "start": i * 4.0, "end": i * 4.0 + 1} for i in range(10)]
    assert [s["text"] for s in segments_of(words)] == ["w0 w1 w2 w3 w4 w5 w6 w7 w8", "w9"]


def test_shifted_tokens_stay_within_their_piece() -> None:
    tokens = [TimedToken(" a", 0.0, 0.5), TimedToken(" b", 29.9, 30.5)]
    # A piece starting at 40 s, decoded with 0.25 s of silence before it, ending at 70 s.
    assert shifted(tokens, 40.0 - 0.25, 40.0, 70.0) == [
        TimedToken(" a", 40.0, 40.25),
        TimedToken(" b", 69.65, 70.0),
    ]


def test_long_audio_is_cut_at_its_quietest_frame() -> None:
    rng = np.random.default_rng(0)
    samples = (rng.standard_normal(RATE * 70) * 0.3).astype(np.float32)
    samples[int(25.0 * RATE) : int(25.3 * RATE)] *= 0.01  # a pause 25 s in
    spans = pause_cuts(samples, RATE)
    assert spans[0][1] in {int(25.05 * RATE), int(25.15 * RATE), int(25.25 * RATE)}  # mid quiet frame
    assert all(end - start <= 30 * RATE for start, end in spans)
    assert [s for s, _ in spans[1:]] == [e for _, e in spans[:-1]] and spans[-1][1] == len(samples)
    assert spans[1][1] - spans[1][0] > 22 * RATE  # no pause: cut in the last 8 s before 30 s
    assert pause_cuts(samples[: 30 * RATE], RATE) == [(0, 30 * RATE)]


def test_audio_settings_come_from_the_processor_config(folder: Path) -> None:
    audio = ParakeetAudio.from_folder(folder)
    assert (audio.spec.sampling_rate, audio.min_samples) == (16000, 320)


def job(**options: Any) -> ExtractJob:
    return ExtractJob(texts=[], labels=None, options=options)


def test_options_are_checked() -> None:
    assert parakeet_options(job(language="de", temperature=0)) == frozenset()
    assert parakeet_options(job(timestamp_granularities=["word", "segment"])) == {"word", "segment"}
    for options, message in [
        ({"language": "zh"}, "Unsupported language 'zh'"),
        ({"temperature": 0.5}, "decodes greedily"),
        ({"timestamp_granularities": ["char"]}, "timestamp_granularities"),
        ({"beam_size": 2}, "Unsupported options for speech to text: beam_size"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            parakeet_options(job(**options))
    with pytest.raises(InvalidInput, match=r"no params\.labels"):
        parakeet_options(ExtractJob(texts=[], labels=["x"], options={}))
    with pytest.raises(InvalidInput, match="does not accept a prompt"):
        parakeet_options(ExtractJob(texts=[], labels=None, options={}, instruction="transcribe this"))
