"""POST /v1/audio/transcriptions in-process: the form's checks and OpenAI's error shape, before any
model runs (the transcripts themselves: tests/integration/test_audio_transcriptions.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from sie.frontend.app import build_app
from sie.frontend.state import FrontendState
from sie.frontend.transcription_render import render_transcription
from sie.settings import Settings
from tests import media_samples as samples
from tests.frontend.test_app import MINILM, FakeDevices, catalog

URL = "/v1/audio/transcriptions"
LIMIT = 100_000
WAV = samples.audio_bytes(samples.tone(0.5, 16000), 16000)


@pytest.fixture
def client() -> Iterator[TestClient]:
    devices = FakeDevices(catalog())
    state = FrontendState(
        settings=Settings(max_request_body_bytes=LIMIT), catalog=devices.catalog, devices=devices
    )
    with TestClient(build_app(state), raise_server_exceptions=False) as test_client:
        yield test_client


def openai_error(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def post(client: TestClient, files: Any = None, **fields: Any) -> Any:
    if files is None:
        files = {"file": ("clip.wav", WAV, "audio/wav")}
    return client.post(URL, data=fields, files=files)


@pytest.mark.parametrize(
    ("fields", "files", "param", "message"),
    [
        ({}, [("model", (None, "tiny/whisper"))], "file", "Field 'file' is required"),
        ({}, None, "model", "Field 'model' is required"),
        (
            {"model": "x", "response_format": "xml"},
            None,
            "response_format",
            "Unsupported response_format 'xml'",
        ),
        ({"model": "x", "temperature": "2"}, None, "temperature", "between 0 and 1"),
        ({"model": "x", "temperature": "nan"}, None, "temperature", "between 0 and 1"),
        ({"model": "x", "prompt": "Once upon"}, None, "prompt", "'prompt' is not supported"),
        ({"model": "x", "stream": "true"}, None, "stream", "Streaming transcription is not supported"),
        ({"model": "x", "beam_size": "5"}, None, "beam_size", "Unsupported field 'beam_size'"),
        ({"model": "x", "language": " "}, None, "language", "language code"),
        (
            {"model": "x", "timestamp_granularities[]": "word"},
            None,
            "timestamp_granularities",
            "requires response_format 'verbose_json'",
        ),
        (
            {"model": "x", "response_format": "verbose_json", "timestamp_granularities[]": ["word", "char"]},
            None,
            "timestamp_granularities",
            "Unsupported timestamp granularity 'char'",
        ),
        (
            {"model": "x"},
            {"file": ("clip.m4a", WAV, "audio/mp4")},
            "file",
            "Unsupported audio file format 'm4a'",
        ),
        ({"model": "x"}, {"file": ("clip.wav", b"", "audio/wav")}, "file", "must not be empty"),
        ({}, [("model", (None, "x")), ("file", (None, "abc"))], "file", "must be a file upload"),
        ({"model": "x"}, [("language", ("en.txt", b"en"))], "language", "must be text, not a file"),
        ({"model": ["x", "y"]}, None, "model", "must appear once"),
    ],
    ids=[
        "no-file",
        "no-model",
        "format",
        "temperature",
        "nan",
        "prompt",
        "stream",
        "unknown-field",
        "language",
        "granularity-needs-verbose",
        "granularity",
        "m4a",
        "empty-file",
        "file-as-text",
        "text-as-file",
        "twice",
    ],
)
def test_bad_forms_are_400_naming_the_field(
    client: TestClient, fields: dict[str, Any], files: Any, param: str, message: str
) -> None:
    error = openai_error(post(client, files, **fields), 400)
    assert error["param"] == param and message in error["message"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_input"


def test_unknown_and_non_whisper_models(client: TestClient) -> None:
    missing = openai_error(post(client, model="org/nope"), 404)
    assert missing["code"] == "model_not_found" and "org/nope" in missing["message"]
    text_model = openai_error(post(client, model=MINILM), 400)
    assert text_model["param"] == "model" and "not a speech-to-text model" in text_model["message"]


def test_not_multipart_and_too_large_bodies(client: TestClient) -> None:
    json_body = openai_error(client.post(URL, json={"model": "x", "file": "abc"}), 400)
    assert "multipart/form-data" in json_body["message"]
    broken = client.post(URL, content=b"--nope\r\n", headers={"content-type": "multipart/form-data"})
    assert "multipart form is not valid" in openai_error(broken, 400)["message"]
    big = {"file": ("clip.wav", b"\0" * (LIMIT + 1), "audio/wav")}
    too_large = openai_error(post(client, big, model="x"), 413)
    assert too_large["code"] == "input_too_long" and str(LIMIT) in too_large["message"]


BOUNDARY = "b0undary"
PART = st.sampled_from(
    [
        b"--b0undary\r\n",
        b"--b0undary--\r\n",
        b'Content-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n',
        b'Content-Disposition: form-data; name="model"\r\n\r\n',
        b"Content-Type: audio/wav\r\n",
        b"\r\n",
        WAV[:64],
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=st.lists(st.one_of(PART, st.binary(max_size=40)), max_size=12).map(b"".join))
def test_hostile_multipart_bodies_are_4xx_in_openai_shape(client: TestClient, body: bytes) -> None:
    content_type = f"multipart/form-data; boundary={BOUNDARY}"
    response = client.post(URL, content=body, headers={"content-type": content_type})
    assert 400 <= response.status_code < 500, response.text
    openai_error(response, response.status_code)


TRANSCRIPT = {
    "text": " hello there. bye",
    "language": "en",
    "duration_ms": 3725_050,
    "segments": [
        {"id": 0, "start": 0.0, "end": 1.5, "text": " hello there."},
        {"id": 1, "start": 3723.25, "end": 3725.05, "text": " bye"},
    ],
    "words": [{"word": " hello", "start": 0.0, "end": 0.4}],
}


def test_subtitles_cue_each_segment() -> None:
    srt = render_transcription(TRANSCRIPT, "srt", ["segment"]).decode()
    assert srt == "1\n00:00:00,000 --> 00:00:01,500\nhello there.\n\n2\n01:02:03,250 --> 01:02:05,050\nbye\n"
    vtt = render_transcription(TRANSCRIPT, "vtt", ["segment"]).decode()
    assert (
        vtt == "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nhello there.\n\n01:02:03.250 --> 01:02:05.050\nbye\n"
    )
