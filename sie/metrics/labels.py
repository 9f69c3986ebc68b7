"""The fixed label values and histogram buckets of every statistic the server keeps.

They are fixed so each statistic can be a dense numpy array in shared memory: a label value is an
index, and a model is its catalog slot (one extra slot for "no model", so that a client sending
random model ids cannot grow the number of series). Anything outside a table counts as "other".
"""

from __future__ import annotations

import bisect

ROUTES = (
    "encode",
    "score",
    "extract",
    "embeddings",
    "rerank",
    "transcriptions",
    "models",
    "health",
    "metrics",
    "openapi",
    "version",
    "other",
)
STATUSES = (200, 400, 401, 404, 405, 413, 415, 422, 429, 499, 500, 502, 503, 504)  # then "other"
CODES = (
    "INVALID_INPUT",
    "INPUT_TOO_LONG",
    "MODEL_NOT_FOUND",
    "MODEL_LOADING",
    "MODEL_LOAD_FAILED",
    "LORA_LOADING",
    "QUEUE_FULL",
    "RESOURCE_EXHAUSTED",
    "DEVICE_UNAVAILABLE",
    "SHUTTING_DOWN",
    "INFERENCE_ERROR",
    "INTERNAL_ERROR",
    "UNAUTHORIZED",
    "OTHER",
)
STAGES = ("queue", "tokenization", "inference", "postprocessing", "total")
DIRECTIONS = ("request", "response")

# Upper bounds; each histogram has one more bucket for everything above the last (+Inf).
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
BATCH_TOKENS_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)

_ROUTE_INDEX = {name: i for i, name in enumerate(ROUTES)}
_STATUS_INDEX = {status: i for i, status in enumerate(STATUSES)}
_CODE_INDEX = {code: i for i, code in enumerate(CODES)}
STAGE = {name: i for i, name in enumerate(STAGES)}


def route_index(name: str) -> int:
    return _ROUTE_INDEX.get(name, len(ROUTES) - 1)


def status_index(status: int) -> int:
    return _STATUS_INDEX.get(status, len(STATUSES))


def status_label(index: int) -> str:
    return str(STATUSES[index]) if index < len(STATUSES) else "other"


def code_index(code: str) -> int:
    return _CODE_INDEX.get(code, len(CODES) - 1)


def bucket(bounds: tuple[float, ...], value: float) -> int:
    """The bucket `value` falls in: the first bound >= value (Prometheus `le`), else the +Inf one."""
    return bisect.bisect_left(bounds, value)


def route_of(path: str) -> str:
    """The route label of a request path (the model part of the path never becomes a label)."""
    if path == "/v1/audio/transcriptions":
        return "transcriptions"
    if path.startswith("/v1/"):
        head = path[4:].split("/", 1)[0]
        return head if head in _ROUTE_INDEX else "other"
    if path == "/v2/rerank":  # Cohere's v2 shape of the same route
        return "rerank"
    if path in ("/healthz", "/livez", "/readyz"):
        return "health"
    return {"/metrics": "metrics", "/openapi.json": "openapi", "/version": "version"}.get(path, "other")
