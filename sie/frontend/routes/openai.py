"""POST /v1/embeddings: the OpenAI embeddings API over the same encode task."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sie.errors import InvalidInput, SieError
from sie.frontend.body import read_body
from sie.frontend.errors import openai_error_response
from sie.frontend.render import render_openai_embeddings
from sie.frontend.state import FrontendState
from sie.frontend.target import resolve
from sie.frontend.tasks.embed import embed
from sie.frontend.tasks.encode import EmbedOptions
from sie.frontend.wire import EmbeddingsRequest, Item, decode_body


async def embeddings(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    try:
        body = await read_body(request, state.settings.max_request_body_bytes)
        req = decode_body(body, "application/json", EmbeddingsRequest)
        texts = [req.input] if isinstance(req.input, str) else req.input
        if not texts or any(not text for text in texts):
            raise InvalidInput("'input' must be a non-empty string or a non-empty list of non-empty strings")
        target = resolve(state, req.model)
        config = target.config
        dim = config.dense_dim()
        if dim is None:
            raise InvalidInput(f"Model '{req.model}' does not produce dense embeddings")
        if req.dimensions is not None and req.dimensions != dim:
            raise InvalidInput(
                f"Model '{req.model}' has {dim} dimensions; 'dimensions' must be {dim} or omitted"
            )
        # OpenAI inputs are documents: the model's document template applies, as on /v1/encode.
        items = [Item(text=text) for text in texts]  # a family's own encode runner sees them as items
        embedded = await embed(state, target, items, target.format(texts, is_query=False), EmbedOptions())
    except SieError as error:
        return openai_error_response(error)
    assert embedded.dense is not None  # EmbedOptions() asks for dense, which the model has
    content = render_openai_embeddings(
        model=req.model,
        dense=embedded.dense,
        encoding_format=req.encoding_format,
        prompt_tokens=embedded.input_tokens,
    )
    return Response(content, media_type="application/json")
