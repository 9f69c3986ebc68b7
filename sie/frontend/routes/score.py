"""POST /v1/score/{model}: rank items against a query; POST /v1/rerank and /v2/rerank: Cohere's shapes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from sie.errors import InvalidInput
from sie.frontend.body import read_body
from sie.frontend.render import render_score
from sie.frontend.routes.answer import answer, stage_timing
from sie.frontend.scoring import rank
from sie.frontend.state import FrontendState
from sie.frontend.target import bind, lora_option, profile_option
from sie.frontend.tasks.pages import score_pages
from sie.frontend.tasks.score import Scored, builds_own_prompt, check_item_count, check_scoring, score
from sie.frontend.wire import (
    Item,
    RerankRequest,
    RerankV2Request,
    ScoreRequest,
    decode_body,
    validate_items,
    wants_json,
)


async def score_route(request: Request) -> Response:
    started = time.perf_counter()
    state: FrontendState = request.app.state.sie
    name = request.path_params["model"]
    slot, config = state.model(name)  # an unknown model is a 404 before its body is read
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, request.headers.get("content-type"), ScoreRequest)
    check_scoring(config, name)
    check_item_count(len(req.items))
    validate_items([req.query], model=name, inputs=config.input_kinds())
    validate_items(req.items, model=name, inputs=config.input_kinds())
    target = bind(name, slot, config, profile_option(req.options), lora_option(req.options))
    if (runner := target.family.score_function()) is not None:  # pairs with images, its own prompts
        scored = await runner(state, target, req.query, req.items, req.instruction, req.options)
        return _render(request, state, name, req, scored, started)
    if target.family.encode_runner is not None:  # pages and queries (sie.frontend.tasks.pages)
        paged = await score_pages(state, target, req.query, req.items)
        return _render(request, state, name, req, paged, started)
    query = req.query.text or ""
    if not builds_own_prompt(config):  # an LLM reranker puts the instruction in its own prompt
        query = target.format([query], is_query=True, instruction=req.instruction)[0]
    scored = await score(
        state,
        target,
        query,
        _texts(req.items),
        instruction=req.instruction,
        max_seq_length=(req.options or {}).get("max_seq_length"),
    )
    return _render(request, state, name, req, scored, started)


def _render(
    request: Request, state: FrontendState, name: str, req: ScoreRequest, scored: Scored, started: float
) -> Response:
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
    scored = await _rerank(state, req.model, req.query, req.documents, req.top_n, req.options)
    results = _results(scored, req.documents, req.top_n, req.return_documents)
    payload = {"model": req.model, "results": results, "usage": {"input_tokens": scored.input_tokens}}
    return Response(msgspec.json.encode(payload), media_type="application/json")


async def rerank_v2(request: Request) -> Response:
    """Cohere's v2 rerank: {id, results: [{index, relevance_score, document?}], meta}."""
    state: FrontendState = request.app.state.sie
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, "application/json", RerankV2Request)
    if req.max_tokens_per_doc is not None:
        raise InvalidInput(
            "'max_tokens_per_doc' is not supported: documents are truncated to the model's own limit"
        )
    if req.relevant_spans:
        raise InvalidInput("'relevant_spans' is not supported by this server")
    documents = [d if isinstance(d, str) else d.text for d in req.documents]
    scored = await _rerank(state, req.model, req.query, documents, req.top_n, req.options)
    payload = {
        "id": str(uuid.uuid4()),
        "results": _results(scored, documents, req.top_n, req.return_documents),
        "meta": {"api_version": {"version": "2"}, "tokens": {"input_tokens": scored.input_tokens}},
    }
    return Response(msgspec.json.encode(payload), media_type="application/json")


async def _rerank(
    state: FrontendState,
    model: str,
    query: str,
    documents: list[str],
    top_n: int | None,
    options: dict[str, Any] | None,
) -> Scored:
    slot, config = state.model(model)
    check_scoring(config, model)
    if top_n is not None and top_n < 1:
        raise InvalidInput("'top_n' must be a positive integer")
    if not query.strip():
        raise InvalidInput("'query' must be a non-empty string")
    check_item_count(len(documents))
    validate_items([Item(text=query)], model=model)
    validate_items([Item(text=d) for d in documents], model=model)
    target = bind(model, slot, config, profile_option(options), lora_option(options))
    if (runner := target.family.score_function()) is not None:
        scored: Scored = await runner(
            state, target, Item(text=query), [Item(text=d) for d in documents], None, options
        )
        return scored
    return await score(state, target, query, documents, max_seq_length=(options or {}).get("max_seq_length"))


def _results(
    scored: Scored, documents: list[str], top_n: int | None, return_documents: bool
) -> list[dict[str, Any]]:
    """The documents best first (top_n of them), each with its index and score."""
    order = sorted(range(len(documents)), key=lambda i: -float(scored.scores[i]))[:top_n]
    results: list[dict[str, Any]] = []
    for index in order:
        entry: dict[str, Any] = {"index": index, "relevance_score": float(scored.scores[index])}
        if return_documents:
            entry["document"] = {"text": documents[index]}
        results.append(entry)
    return results


def _texts(items: list[Item]) -> list[str]:
    return [item.text or "" for item in items]
