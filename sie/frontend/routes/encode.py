"""POST /v1/encode/{model}: decode, embed, postprocess, render."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from sie.frontend.body import read_body
from sie.frontend.pipeline import embed
from sie.frontend.postprocess import apply_output_dtype
from sie.frontend.render import Timing, render_encode, timing_headers
from sie.frontend.state import FrontendState
from sie.frontend.tokenize import format_text
from sie.frontend.wire import (
    EncodeOptions,
    EncodeParams,
    EncodeRequest,
    decode_body,
    output_dtype_of,
    validate_encode,
    wants_json,
)


async def encode(request: Request) -> Response:
    started = time.perf_counter()
    state: FrontendState = request.app.state.sie
    name = request.path_params["model"]
    _, config = state.model(name)
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, request.headers.get("content-type"), EncodeRequest)
    params = req.params or EncodeParams()
    options = params.options or EncodeOptions()
    validate_encode(req, model=name, supported=config.output_types())
    runtime = config.profile(options.profile if options.profile in config.profiles else None)
    templates = runtime.adapter_options.runtime
    texts = [
        format_text(
            item.text or "",
            is_query=bool(options.is_query),
            instruction=params.instruction,
            query_template=templates.query_template,
            doc_template=templates.doc_template,
        )
        for item in req.items
    ]
    embedded = await embed(state, name, texts, profile=options.profile, normalize=options.normalize)
    post_started = time.perf_counter()
    output_dtype = output_dtype_of(req)
    values = apply_output_dtype(embedded.values, output_dtype)
    as_json = wants_json(request.headers.get("accept"))
    postprocessing_ms = (time.perf_counter() - post_started) * 1000
    timing = Timing(
        total_ms=(time.perf_counter() - started) * 1000,
        queue_ms=embedded.queue_ms,
        tokenization_ms=embedded.tokenization_ms,
        inference_ms=embedded.inference_ms,
        postprocessing_ms=postprocessing_ms,
    )
    content = render_encode(
        model=name,
        ids=[item.id for item in req.items],
        dense=values,
        output_dtype=output_dtype,
        dims=embedded.values.shape[1],
        timing=timing,
        input_tokens=embedded.input_tokens,
        as_json=as_json,
    )
    return Response(
        content,
        headers=timing_headers(timing, state.server_version),
        media_type="application/json" if as_json else "application/msgpack",
    )
