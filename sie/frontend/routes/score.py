"""POST /v1/score/{model}: rank items against a query; POST /v1/rerank: the Cohere-style shape."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from sie.errors import InvalidInput
from sie.frontend.body import read_body
from sie.frontend.pipeline import lora_option
from sie.frontend.render import render_score
from sie.frontend.routes.answer import answer, stage_timing
from sie.frontend.scoring import rank
from sie.frontend.state import FrontendState
from sie.frontend.tasks.score import check_item_count, check_scoring, score
from sie.frontend.tokenize import format_text
from sie.frontend.wire import Item, RerankRequest, ScoreRequest, decode_body, validate_items, wants_json


async def score_route(request: Request) -> Response:
    started = time.perf_counter()
    state: FrontendState = request.app.state.sie
    name = request.path_params["model"]
    _, config = state.model(name)
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, request.headers.get("content-type"), ScoreRequest)
    check_scoring(config, name)
    check_item_count(len(req.items))
    validate_items([req.query], model=name)
    validate_items(req.items, model=name)
    profile = _profile_option(req.options)
    runtime = config.profile(profile if profile in config.profiles else None).adapter_options.runtime
    query = format_text(
        req.query.text or "",
        is_query=True,
        instruction=req.instruction,
        runtime=runtime,
    )
    lora = lora_option(config, req.options)
    scored = await score(state, name, query, _texts(req.items), profile=profile, lora=lora)
    ids = [item.id if item.id is not None else f"item-{i}" for i, item in enumerate(req.items)]
    as_json = wants_json(request.headers.get("accept"))
    content = render_score(
        model=name,
        query_id=req.query.id,
        ranked=rank(scored.scores, ids),
        input_tokens=scored.input_tokens,
        as_json=as_json,
    )
    return answer(content, stage_timing(started, scored), state.server_version, as_json=as_json)


async def rerank(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, "application/json", RerankRequest)
    _, config = state.model(req.model)
    check_scoring(config, req.model)
    if req.top_n is not None and req.top_n < 1:
        raise InvalidInput("'top_n' must be a positive integer")
    if not req.query.strip():
        raise InvalidInput("'query' must be a non-empty string")
    check_item_count(len(req.documents))
    validate_items([Item(text=req.query)], model=req.model)
    validate_items([Item(text=d) for d in req.documents], model=req.model)
    scored = await score(
        state,
        req.model,
        req.query,
        req.documents,
        profile=_profile_option(req.options),
        lora=lora_option(config, req.options),
    )
    order = sorted(range(len(req.documents)), key=lambda i: -float(scored.scores[i]))[: req.top_n]
    results: list[dict[str, Any]] = []
    for index in order:
        entry: dict[str, Any] = {"index": index, "relevance_score": float(scored.scores[index])}
        if req.return_documents:
            entry["document"] = {"text": req.documents[index]}
        results.append(entry)
    payload = {"model": req.model, "results": results, "usage": {"input_tokens": scored.input_tokens}}
    return Response(msgspec.json.encode(payload), media_type="application/json")


def _texts(items: list[Item]) -> list[str]:
    return [item.text or "" for item in items]


def _profile_option(options: dict[str, Any] | None) -> str | None:
    profile = (options or {}).get("profile")
    if profile is not None and not isinstance(profile, str):
        raise InvalidInput("options.profile must be a string")
    return profile
