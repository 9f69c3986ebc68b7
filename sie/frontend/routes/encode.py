"""POST /v1/encode/{model}: decode, embed, apply output dtypes, render."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sie.frontend.body import read_body
from sie.frontend.muvera import muvera_params
from sie.frontend.postprocess import apply_output_dtype
from sie.frontend.render import (
    Timing,
    dense_column,
    multivector_column,
    render_encode,
    sparse_column,
)
from sie.frontend.routes.answer import answer
from sie.frontend.smve import smve_params
from sie.frontend.state import FrontendState
from sie.frontend.target import bind
from sie.frontend.tasks.embed import embed
from sie.frontend.tasks.encode import Embedded, EmbedOptions, supported_outputs
from sie.frontend.wire import (
    EncodeOptions,
    EncodeParams,
    EncodeRequest,
    decode_body,
    output_dtype_of,
    output_types_of,
    validate_encode,
    wants_json,
)


async def encode(request: Request) -> Response:
    started = time.perf_counter()
    state: FrontendState = request.app.state.sie
    name = request.path_params["model"]
    slot, config = state.model(name)  # an unknown model is a 404 before its body is read
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, request.headers.get("content-type"), EncodeRequest)
    params = req.params or EncodeParams()
    options = params.options or EncodeOptions()
    lora = options.lora or options.lora_id  # sie-sdk 0.10.1 sends `lora`; `lora_id` is the older name
    target = bind(name, slot, config, options.profile, lora)
    runtime = target.runtime
    muvera = muvera_params(options.muvera, runtime.muvera, runtime.muvera_config)
    smve = smve_params(options.smve, runtime.smve, runtime.smve_config)
    supported = supported_outputs(config, muvera, smve)
    validate_encode(req, model=name, supported=supported, inputs=config.input_kinds())
    is_query = bool(options.is_query)
    texts = target.format(
        [item.text or "" for item in req.items], is_query=is_query, instruction=params.instruction
    )
    output_types = tuple(dict.fromkeys(output_types_of(req, runtime.output_types)))
    embed_options = EmbedOptions(
        output_types=output_types,
        normalize=options.normalize,
        is_query=is_query,
        muvera=muvera,
        smve=smve,
        instruction=params.instruction,
    )
    embedded = await embed(state, target, req.items, texts, embed_options)
    post_started = time.perf_counter()
    as_json = wants_json(request.headers.get("accept"))
    columns = _columns(embedded, output_dtype_of(req), as_json)
    timing = Timing(
        total_ms=(time.perf_counter() - started) * 1000,
        queue_ms=embedded.queue_ms,
        tokenization_ms=embedded.tokenization_ms,
        inference_ms=embedded.inference_ms,
        postprocessing_ms=embedded.postprocessing_ms + (time.perf_counter() - post_started) * 1000,
    )
    content = render_encode(
        model=name,
        ids=[item.id for item in req.items],
        columns=columns,
        timing=timing,
        input_tokens=embedded.input_tokens,
        as_json=as_json,
    )
    return answer(content, timing, state.server_version, as_json=as_json)


def _columns(embedded: Embedded, output_dtype: str, as_json: bool) -> dict[str, list[dict[str, Any]]]:
    """Each requested output in its wire dtype (sparse honours only float16, per the spec)."""
    columns: dict[str, list[dict[str, Any]]] = {}
    if embedded.dense is not None:
        values = apply_output_dtype(embedded.dense, output_dtype)
        columns["dense"] = dense_column(values, output_dtype, embedded.dense.shape[1], as_json)
    if embedded.sparse is not None:
        sparse = embedded.sparse
        if output_dtype == "float16":
            sparse = [(indices, values.astype("<f2")) for indices, values in sparse]
        columns["sparse"] = sparse_column(sparse, embedded.sparse_dims, as_json)
    if embedded.multivector is not None:
        matrices = [apply_output_dtype(m, output_dtype) for m in embedded.multivector]
        token_dims = embedded.multivector[0].shape[1] if embedded.multivector else 0
        columns["multivector"] = multivector_column(matrices, output_dtype, token_dims, as_json)
    return columns
