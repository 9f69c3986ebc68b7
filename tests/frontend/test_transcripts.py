"""Whisper token ids -> text, segments and words, against transformers' WhisperTokenizer on the same
tokenizer (the frontend has only tokenizer.json and the `tokenizers` library)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from sie.frontend.transcripts import WhisperVocab
from tests.tiny_models.whisper import write_whisper_tokenizer


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, WhisperVocab]:
    folder: Path = tmp_path_factory.mktemp("whisper-tokenizer")
    reference = write_whisper_tokenizer(folder)
    return reference, WhisperVocab.from_tokenizer(Tokenizer.from_file(str(folder / "tokenizer.json")))


def text_ids(reference: Any, text: str) -> list[int]:
    return list(reference.encode(text, add_special_tokens=False))


def stamp(vocab: WhisperVocab, seconds: float) -> int:
    return vocab.timestamp_begin + round(seconds / 0.02)


def outputs(reference: Any, vocab: WhisperVocab) -> dict[str, list[int]]:
    """Token sequences shaped like Whisper's: timestamped segments, a second decoding pass of the
    window (timestamps restart lower), a single timestamp ending, and plain text."""
    hello, world = text_ids(reference, " Hello there."), text_ids(reference, " A (quoted) world, again!")
    t = lambda s: stamp(vocab, s)  # noqa: E731
    return {
        "segments": [t(0), *hello, t(2.4), t(2.4), *world, t(5.0), vocab.end],
        "second-pass": [
            t(0),
            *hello,
            t(2.4),
            t(3.0),
            *world,
            t(20.0),
            t(0.5),
            *hello,
            t(1.5),
            t(1.5),
            *world,
            t(4),
        ],
        "single-ending": [t(0), *hello, t(2.4), *world, t(6.0)],
        "no-timestamps": [*hello, *world, vocab.end],
    }


def test_languages_and_special_ids(tokenizers: tuple[Any, WhisperVocab]) -> None:
    reference, vocab = tokenizers
    assert vocab.languages["en"] == reference.convert_tokens_to_ids("<|en|>")
    assert vocab.language_of(reference.convert_tokens_to_ids("<|de|>")) == "de"
    assert vocab.timestamp_begin == reference.convert_tokens_to_ids("<|0.00|>")
    assert len(vocab.languages) >= 99


@pytest.mark.parametrize("case", ["segments", "second-pass", "single-ending", "no-timestamps"])
def test_text_and_segments_equal_the_whisper_tokenizer(
    tokenizers: tuple[Any, WhisperVocab], case: str
) -> None:
    reference, vocab = tokenizers
    ids = outputs(reference, vocab)[case]
    assert vocab.text(ids) == reference.decode(ids, skip_special_tokens=True)
    want = reference.decode(ids, output_offsets=True)["offsets"]
    got = vocab.segments(ids)
    assert [s["text"] for s in got] == [o["text"] for o in want]
    got_times = [t for s in got for t in (s["start"], s["end"])]
    assert got_times == pytest.approx([t for o in want for t in o["timestamp"]])
    shifted = vocab.segments(ids, offset_s=30.0)
    assert [s["start"] - 30.0 for s in shifted] == pytest.approx([s["start"] for s in got])


@pytest.mark.parametrize(
    "text", [" Hello there.", ' He said "no" (twice), then left!', " naïve café — ünïcode", " ok"]
)
def test_words_group_like_transformers(tokenizers: tuple[Any, WhisperVocab], text: str) -> None:
    from transformers.models.whisper.tokenization_whisper import _combine_tokens_into_words

    reference, vocab = tokenizers
    ids = text_ids(reference, text)
    words, _, indices = _combine_tokens_into_words(reference, ids, "english")
    assert vocab._combine(ids) == list(zip(words, indices, strict=True))
    starts = [0.1 * (i + 1) for i in range(len(ids))]
    timed = vocab.words(ids, starts, offset_s=30.0)
    assert [w["word"] for w in timed] == words
    for word, members in zip(timed, indices, strict=True):  # token i spans [t(i - 1), t(i)]
        first, last = members[0], members[-1]
        assert word["start"] == pytest.approx(30.0 + (starts[first - 1] if first else 0.0))
        assert word["end"] == pytest.approx(30.0 + starts[last])


def test_words_skip_special_and_timestamp_tokens(tokenizers: tuple[Any, WhisperVocab]) -> None:
    reference, vocab = tokenizers
    hello = text_ids(reference, " Hello there")
    ids = [stamp(vocab, 0.0), *hello, stamp(vocab, 1.0), vocab.end]
    times = [0.0, *[0.2 * (i + 1) for i in range(len(hello))], 1.0, 1.0]
    words = vocab.words(ids, times)
    assert [w["word"] for w in words] == [" Hello", " there"]
    assert words[0]["start"] == 0.0 and words[-1]["end"] == pytest.approx(0.2 * len(hello))
