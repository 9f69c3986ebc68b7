"""Bodies that used to reach a 500: each is a 400 (or 404) in the spec's shape, in-process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.testclient import TestClient

from sie.frontend.app import build_app
from sie.frontend.errors import handle_http_exception
from sie.frontend.state import FrontendState
from sie.settings import Settings
from tests.frontend.test_app import MINILM, FakeDevices, catalog

MSGPACK = "application/msgpack"


@pytest.fixture
def client() -> Iterator[TestClient]:
    cat = catalog()
    state = FrontendState(settings=Settings(), catalog=cat, devices=FakeDevices(cat))
    with TestClient(build_app(state), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b'{"items": [{"text": "a\xff\xfeb"}]}', "application/json", "not valid UTF-8"),
        (b"\x81\xa5items\x91\x81\xa4text\xa3a\xff\xfe", MSGPACK, "not valid UTF-8"),
        (
            b'{"items": [{"metadata": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_002 + b"]}",
            "application/json",
            "nested too deeply",
        ),
        (
            b"\x81\xa5items\x91\x81\xa8metadata" + b"\x81\xa1a" * 100_000 + b"\x01",
            MSGPACK,
            "nested too deeply",
        ),
    ],
    ids=["json-utf8", "msgpack-utf8", "json-deep", "msgpack-deep"],
)
def test_undecodable_bodies_are_400(client: TestClient, body: bytes, content_type: str, message: str) -> None:
    response = client.post(f"/v1/encode/{MINILM}", content=body, headers={"content-type": content_type})
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["code"] == "INVALID_INPUT"
    assert message in response.json()["detail"]["message"]


@pytest.mark.parametrize("route", ["encode", "score", "extract", "models"])
def test_a_model_id_no_route_can_match_is_model_not_found(route: str) -> None:
    # Starlette's path converter does not match a newline, so routing itself answers 404.
    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/v1/{route}/bad\nid",
        "headers": [],
        "query_string": b"",
    }
    response = asyncio.run(handle_http_exception(Request(scope), HTTPException(404)))
    assert response.status_code == 404
    assert json.loads(bytes(response.body)) == {
        "detail": {"code": "MODEL_NOT_FOUND", "message": "Model 'bad\nid' not found"}
    }


def test_other_unknown_routes_keep_starlettes_shape(client: TestClient) -> None:
    response = client.get("/no/such/route")
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
