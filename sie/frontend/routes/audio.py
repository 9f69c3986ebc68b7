"""POST /v1/audio/transcriptions: OpenAI's transcription API over the extract task of a Whisper model.

The route only reads the multipart form and shapes the answer: the transcript comes from the same
job a /v1/extract request with one audio item runs. Errors are in OpenAI's shape.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from sie.errors import InvalidInput, SieError
from sie.frontend.body import read_body
from sie.frontend.errors import openai_error_response
from sie.frontend.render import timing_headers
from sie.frontend.routes.answer import stage_timing
from sie.frontend.state import FrontendState
from sie.frontend.target import resolve
from sie.frontend.tasks.extract import ExtractJob, extract
from sie.frontend.transcription_form import FormError, parse_transcription_form
from sie.frontend.transcription_render import MEDIA_TYPES, render_transcription
from sie.frontend.wire import AudioInput, Item, validate_items
from sie.model_config import ModelConfig

_ITEM_AUDIO = "Item 0 audio"  # how the extract task's messages name the one item's audio


async def transcriptions(request: Request) -> Response:
    started = time.perf_counter()
    state: FrontendState = request.app.state.sie
    try:
        body = await read_body(request, state.settings.max_request_body_bytes)
        form = await parse_transcription_form(request.headers, body)
        target = resolve(state, form.model)
        _check_transcribes(target.config, form.model)
        item = Item(audio=AudioInput(data=form.audio, format=form.audio_format))
        validate_items([item], model=form.model, inputs=target.config.input_kinds())
        job = ExtractJob(texts=[""], labels=None, options=form.extract_options(), items=[item])
        extracted = await extract(state, target, job)
    except SieError as error:
        return _error_response(error)
    assert extracted.data is not None  # a Whisper model's runner fills one transcript per item
    content = render_transcription(extracted.data[0], form.response_format, form.granularities)
    headers = timing_headers(stage_timing(started, extracted), state.server_version)
    return Response(content, headers=headers, media_type=MEDIA_TYPES[form.response_format])


def _check_transcribes(config: ModelConfig, name: str) -> None:
    if "audio" not in config.input_kinds() or not config.supports_extract():
        raise FormError(f"Model '{name}' is not a speech-to-text model and cannot transcribe audio", "model")


def _error_response(error: SieError) -> Response:
    """OpenAI's shape, `param` naming the form field where the extract task's message tells it."""
    if isinstance(error, FormError):
        return openai_error_response(error, error.param)
    if isinstance(error, InvalidInput) and error.message.startswith(_ITEM_AUDIO):
        # The extract task numbers its items; here the one item is the uploaded file.
        return openai_error_response(InvalidInput("file" + error.message.removeprefix(_ITEM_AUDIO)), "file")
    if isinstance(error, InvalidInput) and "language" in error.message:
        return openai_error_response(error, "language")
    return openai_error_response(error)
