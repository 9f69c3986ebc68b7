"""Fuzzing every route of the real server: from its own /openapi.json (schemathesis, valid and
invalid bodies, JSON and msgpack) and with hostile bodies no schema describes (hypothesis: random
bytes and msgpack, deep nesting, huge numbers, invalid UTF-8, lone surrogates, NaN).

Never a 5xx; a 4xx for every request schemathesis made invalid; every error in the spec's shape;
and the server still serves afterwards. Bounded:
a few hundred requests in all, on the shared server of tiny models of every family.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import negative_data_rejection

from tests.integration.families import DENSE, HYBRID, NER, RERANKER
from tests.integration.server import Server

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
MSGPACK = "application/msgpack"
MODELS = {
    "encode": [HYBRID, DENSE],
    "score": [RERANKER],
    "extract": [NER],
    "models": [DENSE, "no/such-model"],
}
BODY_MODELS = {
    "RerankRequest": [RERANKER, "no/such-model"],
    "RerankV2Request": [RERANKER, "no/such-model"],
    "EmbeddingsRequest": [DENSE, "no/such-model"],
}
EXAMPLES = 12  # per operation, generation mode and media type
# No shrinking: a failure is reported as found, which keeps a failing run as bounded as a passing one.
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
POST_ROUTES = [
    f"/v1/encode/{HYBRID}",
    f"/v1/score/{RERANKER}",
    f"/v1/extract/{NER}",
    "/v1/embeddings",
    "/v1/rerank",
]


@schemathesis.serializer(MSGPACK)
def _msgpack(ctx: Any, value: Any) -> bytes:
    packed: bytes = msgpack.packb(_msgpackable(value), use_bin_type=True)
    return packed


def _msgpackable(value: Any) -> Any:
    """Integers beyond msgpack's 64 bits (negative fuzzing makes them) become floats."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return float(value)
    if isinstance(value, list):
        return [_msgpackable(v) for v in value]
    if isinstance(value, dict):
        return {k: _msgpackable(v) for k, v in value.items()}
    return value


def check_response(path: str, response: Any) -> None:
    """Never a 5xx but the retryable 503s; errors always in the spec's JSON shape."""
    status = response.status_code
    assert status < 500 or status == 503, (path, status, response.content[:500])
    if status < 400:
        return
    assert header(response, "content-type").startswith("application/json"), (path, response.headers)
    body = json.loads(response.content)
    if path.startswith("/v1/embeddings"):
        assert set(body) == {"error"} and {"message", "type", "param", "code"} <= set(body["error"]), body
    else:
        assert set(body) == {"detail"} and set(body["detail"]) == {"code", "message"}, (path, body)
    if status == 503:
        assert body["detail"]["code"] in {
            "MODEL_LOADING",
            "LORA_LOADING",
            "QUEUE_FULL",
            "DEVICE_UNAVAILABLE",
        }, body
        assert header(response, "retry-after"), body


def rejects_invalid(case: Any, response: Any) -> None:
    """A request schemathesis made invalid gets a 4xx. Its own check decides what stayed invalid on
    the wire (a negated value can turn valid once serialized: a number in a query string, say)."""
    assert response.status_code < 500, (case.formatted_path, response.status_code, response.content[:500])
    case.validate_response(response, checks=[negative_data_rejection])


def header(response: Any, name: str) -> str:
    """One header of an httpx response or of a schemathesis one (whose values are lists)."""
    value = response.headers.get(name, "")
    return value[0] if isinstance(value, list) else value


def fuzz_schema(url: str) -> Any:
    """Our own /openapi.json, with the model ids narrowed to ones this server holds (and one it does not)."""
    document = httpx.get(f"{url}/openapi.json", timeout=30).json()
    for path, methods in document["paths"].items():
        route = path.split("/")[2] if path.startswith("/v1/") else ""
        for operation in methods.values():
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "model":
                    parameter["schema"] = {"type": "string", "enum": MODELS[route]}
    for name, ids in BODY_MODELS.items():
        document["components"]["schemas"][name]["properties"]["model"] = {"type": "string", "enum": ids}
    return schemathesis.openapi.from_dict(document)


def test_schemathesis_over_openapi(families: Families) -> None:
    server, _ = families
    schema = fuzz_schema(server.url)
    ran = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        media_types = operation.get_request_payload_content_types() or [None]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for media_type in media_types:
                kwargs = {"media_type": media_type} if media_type else {}
                strategy = operation.as_strategy(mode, **kwargs)

                @FUZZ
                @given(case=strategy)
                def run(case: Any) -> None:
                    response = case.call(base_url=server.url, timeout=60)
                    check_response(case.formatted_path, response)
                    if case.meta.generation.mode.is_negative:
                        rejects_invalid(case, response)

                try:
                    run()
                except Unsatisfiable:  # nothing to make invalid: a GET with no parameters
                    assert (
                        mode == GenerationMode.NEGATIVE and not operation.get_request_payload_content_types()
                    )
                    continue
                ran += 1
    assert ran >= 20  # every operation, both modes, JSON and msgpack where accepted
    still_serves(server)


def nested(depth: int) -> bytes:
    return b'{"items": ' + b"[" * depth + b"]" * depth + b"}"


HOSTILE_JSON = [
    b'{"items": [{"text": "a\xff\xfeb"}]}',  # invalid UTF-8 inside a string
    b'{"items": [{"te\xc3xt": "a"}]}',  # ... inside a key
    b'{"items": [{"text": "\\ud800 lone"}]}',  # a lone surrogate escape
    b'{"items": [{"text": "\\udc00\\ud800"}]}',
    b'{"items": [{"text": "x"}], "params": {"options": {"threshold": NaN, "profile": Infinity}}}',
    b'{"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"threshold": NaN}}}',
    b'{"items": [{"text": "x"}], "params": {"output_types": [1e999]}}',
    b'{"model": "%s", "query": "q", "documents": ["d"], "top_n": 1e400}' % RERANKER.encode(),
    b'{"model": "%s", "query": "q", "documents": ["d"], "top_n": 99999999999999999999999999}'
    % RERANKER.encode(),
    b'{"model": "%s", "input": "x", "dimensions": -9223372036854775809}' % DENSE.encode(),
    b'{"query": {"text": "q"}, "items": [{"text": "d"}], "options": {"profile": NaN}}',
    nested(100_000),
    b'{"items": [' + b'{"text": "x", "metadata": ' * 5000 + b"{}" + b"}" * 5000 + b"]}",
    b"\xef\xbb\xbf" + b'{"items": [{"text": "bom"}]}',
    b"\x00" * 64,
    b"",
]
HOSTILE_MSGPACK = [
    b"\x81\xa5items\x91\x81\xa4text\xa3a\xff\xfe",  # str with invalid UTF-8
    b"\x81\xa5items\x91\x81\xa4text\xa3\xed\xa0\x80",  # UTF-8 of a lone surrogate
    b"\x81\xa5items" + b"\x91" * 100_000 + b"\x90",  # deep nesting
    b"\x81\xa5items\xdd\xff\xff\xff\xff",  # an array claiming 4 billion elements
    b"\x81\xa5items\x91\x81\xa4text\xdb\xff\xff\xff\xff",  # a string claiming 4 GiB
    msgpack.packb({"items": [{"text": "x"}], "params": {"options": {"threshold": math.nan}}}),
    msgpack.packb({"model": RERANKER, "query": "q", "documents": ["d"], "top_n": 2**64 - 1}),
    msgpack.packb({"items": [{"text": "x", "images": [{"data": b"\x00" * 16}]}]}, use_bin_type=True),
    b"\xc1",  # never used
    b"\xd4\x01\x00",  # an ext type
]

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
bodies_with_items = st.fixed_dictionaries(
    {"items": st.lists(values, max_size=3)}, optional={"params": values}
)


def post(url: str, path: str, body: bytes, content_type: str) -> httpx.Response:
    return httpx.post(url + path, content=body, headers={"content-type": content_type}, timeout=60)


@pytest.mark.parametrize("content_type", ["application/json", MSGPACK])
def test_hostile_bodies_on_every_route(families: Families, content_type: str) -> None:
    server, _ = families
    bodies = HOSTILE_JSON if content_type == "application/json" else HOSTILE_MSGPACK
    for path in POST_ROUTES:
        for body in bodies:
            check_response(path, post(server.url, path, body, content_type))
    still_serves(server)


@pytest.mark.parametrize("content_type", ["application/json", MSGPACK])
def test_random_bytes_and_random_msgpack(families: Families, content_type: str) -> None:
    server, _ = families

    @settings(FUZZ, max_examples=25)
    @given(path=st.sampled_from(POST_ROUTES), raw=st.binary(max_size=256), shaped=bodies_with_items)
    def run(path: str, raw: bytes, shaped: dict[str, Any]) -> None:
        check_response(path, post(server.url, path, raw, content_type))
        packed = msgpack.packb(shaped, use_bin_type=True) if content_type == MSGPACK else _as_json(shaped)
        check_response(path, post(server.url, path, packed, content_type))

    run()
    still_serves(server)


def _as_json(value: Any) -> bytes:
    # Binary leaves become latin-1 strings, NaN/Infinity stay as Python's json writes them.
    return json.dumps(value, default=lambda b: b.decode("latin-1")).encode()


def still_serves(server: Server) -> None:
    response = httpx.post(
        f"{server.url}/v1/encode/{DENSE}",
        json={"items": [{"text": "still serving"}]},
        headers={"accept": "application/json"},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["items"][0]["dense"]["values"]) == 384
    assert httpx.get(f"{server.url}/readyz", timeout=30).status_code == 200
