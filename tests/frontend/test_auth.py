"""Bearer tokens before every API route: 401 in the spec's shape; probes and (by default) /metrics open."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sie.bearer_tokens import load_tokens, parse_tokens, read_shared_tokens, share_tokens
from sie.frontend.app import build_app
from sie.frontend.auth import is_valid_token
from sie.frontend.operations import Operations
from sie.frontend.state import FrontendState
from sie.settings import Settings, load_settings
from tests.frontend.test_app import MINILM, FakeDevices, catalog

TOKENS = ["tok-alpha", "tok-beta"]
BODY = {"items": [{"text": "hello"}]}


def client_for(*, protect_metrics: bool = False) -> TestClient:
    cat = catalog()
    state = FrontendState(
        settings=Settings(),
        catalog=cat,
        devices=FakeDevices(cat),
        preload_slots=[cat.slot(MINILM)],
        ops=Operations(auth_tokens=TOKENS, protect_metrics=protect_metrics),
    )
    return TestClient(build_app(state), raise_server_exceptions=False)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with client_for() as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "accept": "application/json"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer nope"},
        {"authorization": "tok-alpha"},
        {"authorization": "Basic tok-alpha"},
        {"authorization": "Bearer tok-alph"},
        {"authorization": "Bearer tok-alpha2"},
    ],
    ids=["missing", "wrong", "no-scheme", "basic", "prefix", "longer"],
)
def test_missing_or_wrong_token_is_401_in_the_spec_shape(client: TestClient, headers: dict[str, str]) -> None:
    for method, path in [
        ("POST", f"/v1/encode/{MINILM}"),
        ("GET", "/v1/models"),
        ("GET", "/openapi.json"),
        ("POST", "/v1/rerank"),
        ("GET", "/version"),
        ("POST", "/v1/nonexistent"),
    ]:
        response = client.request(method, path, json=BODY, headers=headers)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"] == "Bearer"
        assert response.json()["detail"]["code"] == "UNAUTHORIZED"
        assert response.headers["x-sie-instance"]


def test_openai_route_answers_401_in_openai_shape(client: TestClient) -> None:
    response = client.post("/v1/embeddings", json={"model": MINILM, "input": "hi"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize("token", TOKENS)
def test_every_configured_token_is_accepted(client: TestClient, token: str) -> None:
    response = client.post(f"/v1/encode/{MINILM}", json=BODY, headers=bearer(token))
    assert response.status_code == 200, response.text
    assert len(response.json()["items"]) == 1
    assert client.get("/v1/models", headers={"authorization": f"bearer {token}"}).status_code == 200


def test_probes_and_metrics_stay_open(client: TestClient) -> None:
    for path in ("/healthz", "/livez", "/readyz", "/metrics"):
        assert client.get(path).status_code == 200, path


def test_metrics_can_be_protected() -> None:
    with client_for(protect_metrics=True) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers=bearer("tok-beta")).status_code == 200
        assert client.get("/readyz").status_code == 200


def test_token_comparison() -> None:
    tokens = [t.encode() for t in TOKENS]
    assert is_valid_token(b"tok-beta", tokens)
    assert not is_valid_token(b"", tokens)
    assert not is_valid_token(b"tok-beta ", tokens)
    assert not is_valid_token("tök".encode(), tokens)


def test_tokens_from_settings_and_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# operators\ntok-file-1\n\n  tok-file-2  \n")
    settings = load_settings({"auth_token_file": str(path)}, {"SIE_AUTH_TOKENS": "tok-env, tok-file-1"})
    assert load_tokens(settings) == ["tok-env", "tok-file-1", "tok-file-2"]
    assert load_tokens(load_settings({}, {"SIE_AUTH_TOKEN": "single"})) == ["single"]  # SIE's name
    assert load_tokens(Settings()) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("# nothing\n", "holds no token")],
    ids=["missing", "empty"],
)
def test_an_unusable_token_file_stops_start_up(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "tokens"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_tokens(Settings(auth_token_file=str(path)))


def test_tokens_never_travel_on_argv_but_in_a_memfd() -> None:
    settings = load_settings({}, {"SIE_AUTH_TOKENS": "s3cret-token"})
    assert "s3cret-token" not in settings.encode()
    assert Settings.decode(settings.encode()).auth_tokens is None
    fd = share_tokens(load_tokens(settings))
    assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
    assert read_shared_tokens(os.dup(fd)) == ["s3cret-token"]
    os.close(fd)
    assert share_tokens([]) == -1 and read_shared_tokens(-1) == []
    assert parse_tokens("a\n#b\n c \n") == ["a", "c"]
