"""GET /openapi.json: an OpenAPI 3.1 description generated from the same Structs that decode bodies."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from sie.frontend.wire import (
    EmbeddingsRequest,
    EncodeRequest,
    ExtractRequest,
    RerankRequest,
    RerankV2Request,
    ScoreRequest,
)

_ERROR = {
    "type": "object",
    "properties": {
        "detail": {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        }
    },
}


def _operation(summary: str, request_ref: str | None, media: list[str], tag: str) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "tags": [tag],
        "responses": {
            "200": {"description": "Success", "content": {m: {} for m in media}},
            "default": {
                "description": "Error (see the error table)",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }
    if request_ref:
        schema = {"$ref": f"#/components/schemas/{request_ref}"}
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": schema}, "application/msgpack": {"schema": schema}},
        }
    return op


def build_openapi(version: str) -> bytes:
    (_, components) = msgspec.json.schema_components(
        [EncodeRequest, ScoreRequest, ExtractRequest, EmbeddingsRequest, RerankRequest, RerankV2Request],
        ref_template="#/components/schemas/{name}",
    )
    components["Error"] = _ERROR
    model_param = {
        "name": "model",
        "in": "path",
        "required": True,
        "schema": {"type": "string"},
        "description": "raw model id, slashes included, not URL-escaped",
    }
    both = ["application/msgpack", "application/json"]
    encode = _operation("Dense, sparse and multi-vector embeddings", "EncodeRequest", both, "encode")
    score = _operation("Score (rerank) items against a query", "ScoreRequest", both, "score")
    extract = _operation("Entities and classifications", "ExtractRequest", both, "extract")
    for operation in (encode, score, extract):
        operation["parameters"] = [model_param]
    get_model = _operation("One model's state", None, ["application/json"], "models")
    get_model["parameters"] = [model_param]
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "sie", "version": version},
        "paths": {
            "/v1/encode/{model}": {"post": encode},
            "/v1/score/{model}": {"post": score},
            "/v1/extract/{model}": {"post": extract},
            "/v1/rerank": {
                "post": _operation("Cohere-style rerank", "RerankRequest", ["application/json"], "rerank")
            },
            "/v2/rerank": {
                "post": _operation("Cohere v2 rerank", "RerankV2Request", ["application/json"], "rerank")
            },
            "/v1/embeddings": {
                "post": _operation("OpenAI embeddings", "EmbeddingsRequest", ["application/json"], "openai")
            },
            "/v1/models": {"get": _operation("Model catalogue", None, ["application/json"], "models")},
            "/v1/models/{model}": {"get": get_model},
            "/healthz": {"get": _operation("Liveness", None, ["text/plain"], "health")},
            "/livez": {"get": _operation("Liveness", None, ["text/plain"], "health")},
            "/readyz": {"get": _operation("Readiness", None, ["text/plain"], "health")},
            "/metrics": {"get": _operation("Prometheus metrics", None, ["text/plain"], "operations")},
            "/version": {"get": _operation("Versions", None, ["application/json"], "operations")},
        },
        "components": {"schemas": components},
    }
    return msgspec.json.encode(doc)


async def openapi(request: Request) -> Response:
    return Response(request.app.state.openapi, media_type="application/json")
