"""OpenAI's transcription API on the media server: the real `openai` client against a tiny Whisper,
checked against transformers' `generate` on the same weights and audio bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from tests import media_samples as samples
from tests.integration.media_models import TEXT_ONLY, WHISPER
from tests.integration.test_media_extract import (
    NOISE,
    RATE,
    SHORT,
    Media,
    WhisperReference,
    audio_item,
    extracted,
)

pytestmark = pytest.mark.slow

CLIPS = {"short": SHORT, "noise": NOISE}  # one window, and two (30 s + 2 s)


@pytest.fixture(scope="module")
def reference(media: Media) -> WhisperReference:
    return WhisperReference(media[1][WHISPER])


@pytest.fixture(scope="module")
def client(media: Media) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{media[0].url}/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def wav(name: str) -> tuple[str, bytes, str]:
    return (f"{name}.wav", samples.audio_bytes(CLIPS[name], RATE, "WAV", "FLOAT"), "audio/wav")


def reference_text(reference: WhisperReference, name: str, timestamps: bool) -> str:
    windows = reference.windows(name, CLIPS[name], timestamps=timestamps)
    return "".join(reference.tokenizer.decode(ids, skip_special_tokens=True) for ids, _ in windows)


def reference_segments(reference: WhisperReference, name: str) -> list[tuple[str, float, float]]:
    """(text, start, end) per segment, each window's offsets shifted by the window's start."""
    windows = reference.windows(name, CLIPS[name], timestamps=True)
    return [
        (o["text"], o["timestamp"][0] + 30 * w, o["timestamp"][1] + 30 * w)
        for w, (ids, _) in enumerate(windows)
        for o in reference.tokenizer.decode(ids, output_offsets=True)["offsets"]
    ]


@pytest.mark.parametrize("name", list(CLIPS))
def test_json_and_text_match_generate(client: openai.OpenAI, reference: WhisperReference, name: str) -> None:
    want = reference_text(reference, name, timestamps=False)
    as_json = client.audio.transcriptions.create(model=WHISPER, file=wav(name), response_format="json")
    assert as_json.text == want
    usage: Any = as_json.usage
    assert usage.type == "duration" and usage.seconds == pytest.approx(len(CLIPS[name]) / RATE, abs=1e-3)
    as_text = client.audio.transcriptions.create(model=WHISPER, file=wav(name), response_format="text")
    assert as_text == want
    default = client.audio.transcriptions.create(model=WHISPER, file=wav(name))
    assert default.text == want


def test_verbose_json_has_the_segments_of_generate(
    client: openai.OpenAI, reference: WhisperReference
) -> None:
    verbose = client.audio.transcriptions.create(
        model=WHISPER, file=wav("noise"), response_format="verbose_json"
    )
    assert verbose.text == reference_text(reference, "noise", timestamps=True)
    assert f"<|{verbose.language}|>" == reference.windows("noise", NOISE, timestamps=True)[0][1]
    assert verbose.duration == pytest.approx(len(NOISE) / RATE, abs=1e-3)
    assert verbose.words is None  # segments only, OpenAI's default granularity
    segments = verbose.segments or []
    want = reference_segments(reference, "noise")
    assert [s.id for s in segments] == list(range(len(want)))
    assert [s.text for s in segments] == [text for text, _, _ in want]
    np.testing.assert_allclose([(s.start, s.end) for s in segments], [(a, b) for _, a, b in want], atol=1e-6)


def test_word_timestamps(client: openai.OpenAI, reference: WhisperReference) -> None:
    words_only = client.audio.transcriptions.create(
        model=WHISPER, file=wav("noise"), response_format="verbose_json", timestamp_granularities=["word"]
    )
    assert words_only.segments is None
    words = words_only.words or []
    assert words and "".join(w.word for w in words) == words_only.text
    assert all(0 <= w.start <= w.end <= words_only.duration + 0.02 for w in words)
    both = client.audio.transcriptions.create(
        model=WHISPER,
        file=wav("noise"),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    assert both.text == reference_text(reference, "noise", timestamps=True)
    assert [s.text for s in both.segments or []] == [
        text for text, _, _ in reference_segments(reference, "noise")
    ]
    assert [w.model_dump() for w in both.words or []] == [w.model_dump() for w in words]


def test_verbose_json_is_the_extract_transcript(client: openai.OpenAI, media: Media) -> None:
    """The same job as /v1/extract on one audio item, with the same options."""
    name, granularities = "noise", ["segment", "word"]
    verbose = client.audio.transcriptions.create(
        model=WHISPER,
        file=wav(name),
        response_format="verbose_json",
        timestamp_granularities=granularities,  # type: ignore[arg-type]
        language="en",
    )
    [item] = extracted(
        media[0].url,
        WHISPER,
        [audio_item(wav(name)[1], "wav")],
        options={"timestamp_granularities": granularities, "language": "en"},
    )
    data = item["data"]
    assert (verbose.text, verbose.language, verbose.duration) == (
        data["text"],
        "en",
        data["duration_ms"] / 1000,
    )
    assert [s.model_dump(exclude_none=True) for s in verbose.segments or []] == data["segments"]
    assert [w.model_dump() for w in verbose.words or []] == data["words"]


@pytest.mark.parametrize("response_format", ["srt", "vtt"])
def test_subtitles_cue_the_segments(
    client: openai.OpenAI, reference: WhisperReference, response_format: Any
) -> None:
    body = client.audio.transcriptions.create(
        model=WHISPER, file=wav("noise"), response_format=response_format
    )
    assert isinstance(body, str)
    want = reference_segments(reference, "noise")
    cues = [cue.splitlines() for cue in body.removeprefix("WEBVTT\n\n").strip("\n").split("\n\n")]
    assert [cue[-1] for cue in cues] == [text.strip() for text, _, _ in want]
    separator = "." if response_format == "vtt" else ","
    assert all(separator in cue[-2] and " --> " in cue[-2] for cue in cues)


def test_named_language(client: openai.OpenAI) -> None:
    verbose = client.audio.transcriptions.create(
        model=WHISPER, file=wav("short"), response_format="verbose_json", language="de"
    )
    assert verbose.language == "de"


def bad_request(call: Any, kind: type[openai.APIStatusError] = openai.BadRequestError) -> Any:
    with pytest.raises(kind) as raised:
        call()
    error = raised.value
    assert set(error.body) == {"message", "type", "param", "code"}, error.body  # type: ignore[arg-type]
    return error


def test_bad_input_is_a_4xx_in_openai_shape(client: openai.OpenAI, media: Media) -> None:
    create = client.audio.transcriptions.create
    undecodable = bad_request(lambda: create(model=WHISPER, file=("clip.wav", b"not audio", "audio/wav")))
    assert undecodable.param == "file" and "not decodable audio" in undecodable.message
    unknown = bad_request(lambda: create(model="nope/whisper", file=wav("short")), openai.NotFoundError)
    assert unknown.code == "model_not_found"
    text_model = bad_request(lambda: create(model=TEXT_ONLY, file=wav("short")))
    assert text_model.param == "model" and "not a speech-to-text model" in text_model.message
    response_format: Any = "xml"
    wrong_format = bad_request(
        lambda: create(model=WHISPER, file=wav("short"), response_format=response_format)
    )
    assert wrong_format.param == "response_format"
    language = bad_request(lambda: create(model=WHISPER, file=wav("short"), language="xx"))
    assert language.param == "language" and "Unsupported language 'xx'" in language.message
    # No file at all: the client will not send that, so a plain multipart form does.
    url = f"{media[0].url}/v1/audio/transcriptions"
    no_file = httpx.post(url, files=[("model", (None, WHISPER))], timeout=30)
    assert no_file.status_code == 400
    assert no_file.json()["error"]["param"] == "file"
