"""POST /v1/extract/{model}: entities and classifications per item, all five result keys always."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sie.frontend.body import read_body
from sie.frontend.render import render_extract
from sie.frontend.routes.answer import answer, stage_timing
from sie.frontend.state import FrontendState
from sie.frontend.target import bind, lora_option
from sie.frontend.tasks.extract import Extracted, ExtractJob, check_extraction, extract
from sie.frontend.wire import ExtractParams, ExtractRequest, decode_body, validate_items, wants_json


async def extract_route(request: Request) -> Response:
    started = time.perf_counter()
    state: FrontendState = request.app.state.sie
    name = request.path_params["model"]
    slot, config = state.model(name)  # an unknown model is a 404 before its body is read
    body = await read_body(request, state.settings.max_request_body_bytes)
    req = decode_body(body, request.headers.get("content-type"), ExtractRequest)
    params = req.params or ExtractParams()
    check_extraction(config, name, params.labels)
    validate_items(req.items, model=name, inputs=config.input_kinds(), state_items=config.takes_state_items())
    options = params.options or {}
    profile = options.get("profile") if isinstance(options.get("profile"), str) else None
    target = bind(name, slot, config, profile, lora_option(options))
    # Offsets of entities point into the item's own text, so no instruction or template is applied
    # here; a family that reads the instruction (gliclass) puts it in its own prompt.
    texts = [item.text or "" for item in req.items]
    job = ExtractJob(
        texts=texts,
        labels=params.labels,
        options=options,
        items=req.items,
        instruction=params.instruction,
        output_schema=params.output_schema,
    )
    extracted = await extract(state, target, job)
    as_json = wants_json(request.headers.get("accept"))
    content = render_extract(model=name, items=_items(req.items, extracted), as_json=as_json)
    return answer(content, stage_timing(started, extracted), state.server_version, as_json=as_json)


def wire_object(found: dict[str, Any]) -> dict[str, Any]:
    """A detection as SIE and its SDK give it: `bbox` [x, y, width, height] in whole pixels of the
    original image (each truncated, as SIE truncates), from the runner's float corners."""
    x0, y0, x1, y1 = found["corners"]
    return {
        "label": found["label"],
        "score": found["score"],
        "bbox": [int(x0), int(y0), int(x1 - x0), int(y1 - y0)],
    }


def _items(items: list[Any], extracted: Extracted) -> list[dict[str, Any]]:
    return [
        {
            "id": item.id,
            "entities": extracted.entities[i],
            "relations": extracted.relations[i] if extracted.relations is not None else [],
            "classifications": extracted.classifications[i],
            "objects": [wire_object(o) for o in extracted.objects[i]]
            if extracted.objects is not None
            else [],
            "data": extracted.data[i] if extracted.data is not None else {},
        }
        for i, item in enumerate(items)
    ]
