"""The multipart form of OpenAI's POST /v1/audio/transcriptions, read and checked.

Fields: `file` (the audio upload), `model`, `language`, `prompt`, `response_format` (json, text,
verbose_json, srt, vtt), `temperature` (0 to 1), `timestamp_granularities[]` (segment, word) and
`stream` (false only). Every problem is a `FormError`: a 400 that names the offending field.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from starlette.datastructures import FormData, Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from sie.errors import InvalidInput
from sie.frontend.media.audio import DECLARED_FORMATS

RESPONSE_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
GRANULARITIES = frozenset({"segment", "word"})
_GRANULARITY_FIELDS = frozenset({"timestamp_granularities[]", "timestamp_granularities"})
_TEXT_FIELDS = frozenset({"model", "language", "prompt", "response_format", "temperature", "stream"})
_MAX_TEXT_FIELD_BYTES = 64 * 1024  # a text field is a model id or a short prompt, never megabytes
_MAX_FIELDS = 16


class FormError(InvalidInput):
    """A 400 about one form field, which OpenAI's error shape names in `param`."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class TranscriptionForm:
    audio: bytes
    audio_format: str | None  # from the file name's extension; None lets the bytes decide
    model: str
    language: str | None = None
    temperature: float | None = None
    response_format: str = "json"
    granularities: list[str] = field(default_factory=list)

    def extract_options(self) -> dict[str, Any]:
        """The same `options` a /v1/extract request on a Whisper model takes."""
        options: dict[str, Any] = {}
        if self.language is not None:
            options["language"] = self.language
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.granularities:
            options["timestamp_granularities"] = list(self.granularities)
        return options


async def parse_transcription_form(headers: Headers, body: bytes) -> TranscriptionForm:
    """The request's form, already read within the body limit; raises FormError."""
    if not headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise FormError("The request body must be multipart/form-data", None)
    form = await _parse(headers, body)
    try:
        upload, values, granularities = _fields(form)
        audio = await upload.read()
    finally:
        await form.close()
    if not audio:
        raise FormError("Field 'file' must not be empty", "file")
    return TranscriptionForm(
        audio=audio,
        audio_format=_audio_format(upload.filename),
        model=_model(values),
        language=_language(values),
        temperature=_temperature(values),
        response_format=_response_format(values),
        granularities=_granularities(granularities, values),
    )


async def _parse(headers: Headers, body: bytes) -> FormData:
    async def chunks() -> AsyncIterator[bytes]:
        yield body

    parser = MultiPartParser(
        headers, chunks(), max_files=1, max_fields=_MAX_FIELDS, max_part_size=_MAX_TEXT_FIELD_BYTES
    )
    try:
        return await parser.parse()
    except MultiPartException as error:
        raise FormError(f"The multipart form is not valid: {error}", None) from None
    except (KeyError, ValueError):  # no boundary, or a malformed header
        raise FormError("The multipart form is not valid", None) from None


def _fields(form: FormData) -> tuple[UploadFile, dict[str, str], list[str]]:
    upload: UploadFile | None = None
    values: dict[str, str] = {}
    granularities: list[str] = []
    for name, value in form.multi_items():
        if name == "file":
            if not isinstance(value, UploadFile):
                raise FormError("Field 'file' must be a file upload", "file")
            upload = value
        elif isinstance(value, UploadFile):
            raise FormError(f"Field '{name}' must be text, not a file", name)
        elif name in _GRANULARITY_FIELDS:
            granularities.append(value)
        elif name in _TEXT_FIELDS:
            if name in values:
                raise FormError(f"Field '{name}' must appear once", name)
            values[name] = value
        else:
            raise FormError(f"Unsupported field '{name}'", name)
    if upload is None:
        raise FormError("Field 'file' is required", "file")
    if values.get("prompt"):
        # Whisper's prompt conditioning is not run by this server; ignoring it would change results silently.
        raise FormError("Field 'prompt' is not supported by this server", "prompt")
    if values.get("stream", "false").lower() != "false":
        raise FormError("Streaming transcription is not supported: 'stream' must be false", "stream")
    return upload, values, granularities


def _audio_format(filename: str | None) -> str | None:
    extension = PurePosixPath(filename or "").suffix.lower().lstrip(".")
    if not extension:
        return None
    if extension not in DECLARED_FORMATS:
        raise FormError(
            f"Unsupported audio file format '{extension}' (supported: wav, flac, ogg, opus, mp3, mpeg, mpga)",
            "file",
        )
    return extension


def _model(values: dict[str, str]) -> str:
    model = values.get("model", "").strip()
    if not model:
        raise FormError("Field 'model' is required", "model")
    return model


def _language(values: dict[str, str]) -> str | None:
    language = values.get("language")
    if language is None:
        return None
    if not language.strip():
        raise FormError("Field 'language' must be a language code such as 'en'", "language")
    return language.strip().lower()


def _temperature(values: dict[str, str]) -> float | None:
    raw = values.get("temperature")
    if raw is None:
        return None
    try:
        temperature = float(raw)
    except ValueError:
        raise FormError("Field 'temperature' must be a number between 0 and 1", "temperature") from None
    if not math.isfinite(temperature) or not 0 <= temperature <= 1:
        raise FormError("Field 'temperature' must be a number between 0 and 1", "temperature")
    return temperature


def _response_format(values: dict[str, str]) -> str:
    response_format = values.get("response_format", "json")
    if response_format not in RESPONSE_FORMATS:
        raise FormError(
            f"Unsupported response_format '{response_format}' (supported: {', '.join(RESPONSE_FORMATS)})",
            "response_format",
        )
    return response_format


def _granularities(asked: list[str], values: dict[str, str]) -> list[str]:
    """What the transcript must time: OpenAI's default for verbose_json is segments."""
    unknown = [value for value in asked if value not in GRANULARITIES]
    if unknown:
        raise FormError(
            f"Unsupported timestamp granularity '{unknown[0]}' (supported: segment, word)",
            "timestamp_granularities",
        )
    response_format = values.get("response_format", "json")
    if asked and response_format != "verbose_json":
        raise FormError(
            "timestamp_granularities requires response_format 'verbose_json'", "timestamp_granularities"
        )
    if response_format in ("srt", "vtt"):
        return ["segment"]  # subtitles are cut at segments
    if response_format == "verbose_json":
        return list(dict.fromkeys(asked)) or ["segment"]
    return []
