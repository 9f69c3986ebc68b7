"""The HTTP layer alone: `build_app` over a fake `Devices`, driven in-process by TestClient."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Iterator
from typing import Any

import msgpack  # type: ignore[import-untyped]
import numpy as np
import pytest
from starlette.testclient import TestClient

from sie.catalog import Catalog, UnsupportedModel, load_catalog
from sie.errors import DeviceUnavailable, InputTooLong, QueueFull, SieError
from sie.frontend.app import build_app
from sie.frontend.devices import Placement
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.model_config import parse_model_config
from sie.settings import Settings
from sie.shm.control import ModelState
from sie.shm.layout import ResultKind, TokenBatch

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
# A second id with more slashes and a colon, served from the same weights (tokenizer only here).
ODD = "org/team/odd-model:sparse"
MSGPACK = "application/msgpack"
JSON_ACCEPT = {"accept": "application/json"}
MODEL_INFO_KEYS = {
    "name",
    "inputs",
    "outputs",
    "dims",
    "loaded",
    "state",
    "last_error",
    "max_sequence_length",
    "profiles",
    "device",
    "memory_bytes",
    "last_used",
    "queue_depth",
    "loads",
    "instance",
    "supported",
    "unsupported_profiles",
}
UNSUPPORTED = "org/gliclass"
UNSUPPORTED_REASON = "profile 'default': GLiClassAdapter: zero-shot classification is not served here"


def fake_vector(ids: np.ndarray, dim: int) -> np.ndarray:
    """A deterministic vector per token sequence, so a reply can be checked row by row."""
    rng = np.random.default_rng(zlib.crc32(np.ascontiguousarray(ids, np.int32).tobytes()))
    return rng.standard_normal(dim).astype(np.float32)


class FakeDevices:
    """Satisfies `sie.frontend.devices.Devices`; every state is a plain attribute."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.states = {slot: ModelState.LOADED for slot in range(len(catalog))}
        self.errors: dict[int, str] = {}
        self.retry_allowed: set[int] = set()  # failed models whose cool-down has passed
        self.ready = True
        self.draining = False
        self.load_requests: list[int] = []
        self.encode_error: SieError | None = None
        self.batches: list[TokenBatch] = []

    def is_draining(self) -> bool:
        return self.draining

    def model_state(self, slot: int) -> ModelState:
        return self.states[slot]

    def model_error(self, slot: int) -> str:
        return self.errors.get(slot, "")

    def placements(self, slot: int) -> list[Placement]:
        return []

    def is_ready(self, preload_slots: list[int]) -> bool:
        return self.ready

    def can_retry_load(self, slot: int) -> bool:
        return slot in self.retry_allowed

    def loads(self, slot: int) -> int:
        return 1 if self.states[slot] == ModelState.LOADED else 0

    def request_load(self, slot: int) -> None:
        self.load_requests.append(slot)

    async def submit(self, batch: TokenBatch) -> Results:
        if self.encode_error is not None:
            raise self.encode_error
        self.batches.append(batch)
        dim = self.catalog.models[batch.model_slot].dense_dim() or 0
        rows = [
            fake_vector(batch.input_ids[batch.offsets[i] : batch.offsets[i + 1]], dim)
            for i in range(batch.n_items)
        ]
        dense = {ResultKind.DENSE: np.stack(rows)}
        return Results(dense, {}, [], queue_ms=0.5, inference_ms=1.5)


def catalog() -> Catalog:
    builtin = load_catalog().get(MINILM)
    odd = parse_model_config(
        {
            "sie_id": ODD,
            "weights": {"package": builtin.weights.package, "package_path": builtin.weights.package_path},
            "tasks": {"encode": {"dense": {"dim": 16}}},
            "max_sequence_length": 128,
            "profiles": {
                "default": {"adapter_options": {"runtime": {"normalize": False}}},
                "fast": {"max_batch_tokens": 100},
            },
            "refused_profiles": {"banking": "runtime.lora_id: not loaded by profile here"},
        }
    )
    unsupported = UnsupportedModel(UNSUPPORTED, "models/org__gliclass.yaml", UNSUPPORTED_REASON)
    return Catalog([builtin, odd], unsupported=[unsupported])


@pytest.fixture
def devices() -> FakeDevices:
    return FakeDevices(catalog())


@pytest.fixture
def state(devices: FakeDevices) -> FrontendState:
    cat = devices.catalog
    return FrontendState(
        settings=Settings(max_request_body_bytes=100_000),
        catalog=cat,
        devices=devices,
        preload_slots=[cat.slot(MINILM)],
    )


@pytest.fixture
def client(state: FrontendState) -> Iterator[TestClient]:
    with TestClient(build_app(state), raise_server_exceptions=False) as test_client:
        yield test_client


def post_encode(client: TestClient, model: str, body: dict[str, Any], **headers: str) -> Any:
    return client.post(
        f"/v1/encode/{model}",
        content=json.dumps(body),
        headers={"content-type": "application/json", **headers},
    )


def unpack(content: bytes) -> Any:
    def hook(obj: dict[Any, Any]) -> Any:
        if obj.get(b"nd") is True:
            return np.frombuffer(obj[b"data"], np.dtype(obj[b"type"])).reshape(obj[b"shape"])
        return obj

    return msgpack.unpackb(content, raw=False, object_hook=hook)


def error_of(response: Any) -> tuple[str, str]:
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"detail"} and set(body["detail"]) == {"code", "message"}
    return body["detail"]["code"], body["detail"]["message"]


def expected_rows(
    devices: FakeDevices, texts: list[str], model: str = MINILM, normalize: bool = True
) -> np.ndarray:
    config = devices.catalog.get(model)
    from sie.frontend.tokenize import TokenizerCache

    encoded = TokenizerCache().get(config).encode(texts)
    dim = config.dense_dim() or 0
    rows = np.stack(
        [
            fake_vector(encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]], dim)
            for i in range(len(texts))
        ]
    )
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) if normalize else rows


# -- routing and content negotiation -----------------------------------------------------------------


@pytest.mark.parametrize("model", [MINILM, ODD])
def test_model_ids_with_slashes_and_colons_route_and_echo(
    client: TestClient, devices: FakeDevices, model: str
) -> None:
    texts = ["first text", "a second, longer text", "first text"]
    response = post_encode(
        client, model, {"items": [{"text": t, "id": str(i)} for i, t in enumerate(texts)]}, **JSON_ACCEPT
    )
    assert response.status_code == 200, response.text
    payload = response.json()
    assert payload["model"] == model
    assert [item["id"] for item in payload["items"]] == ["0", "1", "2"]
    got = np.asarray([item["dense"]["values"] for item in payload["items"]], np.float32)
    want = expected_rows(devices, texts, model, normalize=model == MINILM)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got[0], got[2])
    assert devices.batches[-1].model_slot == devices.catalog.slot(model)
    info = client.get(f"/v1/models/{model}")
    assert info.status_code == 200 and info.json()["name"] == model


@pytest.mark.parametrize(
    ("accept", "msgpack_reply"),
    [
        (None, True),
        ("*/*", True),
        ("text/html", True),
        ("application/json", False),
        ("application/json, application/msgpack", True),
        ("application/x-msgpack", True),
    ],
)
def test_content_negotiation(
    client: TestClient, devices: FakeDevices, accept: str | None, msgpack_reply: bool
) -> None:
    headers = {"content-type": "application/json"}
    if accept is not None:
        headers["accept"] = accept
    response = client.post(
        f"/v1/encode/{MINILM}", content=json.dumps({"items": [{"text": "hi"}]}), headers=headers
    )
    assert response.status_code == 200, response.text
    want = expected_rows(devices, ["hi"])[0]
    if msgpack_reply:
        assert response.headers["content-type"] == MSGPACK
        values = unpack(response.content)["items"][0]["dense"]["values"]
        assert values.dtype == np.float32
    else:
        assert response.headers["content-type"].startswith("application/json")
        values = np.asarray(response.json()["items"][0]["dense"]["values"], np.float32)
    np.testing.assert_allclose(values, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("content_type", ["application/msgpack", "application/x-msgpack"])
def test_msgpack_request_body(client: TestClient, devices: FakeDevices, content_type: str) -> None:
    body = msgpack.packb({"items": [{"text": "packed"}]}, use_bin_type=True)
    response = client.post(
        f"/v1/encode/{MINILM}", content=body, headers={"content-type": content_type, **JSON_ACCEPT}
    )
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(
        response.json()["items"][0]["dense"]["values"],
        expected_rows(devices, ["packed"])[0],
        rtol=1e-6,
        atol=1e-7,
    )


def test_errors_are_json_even_when_msgpack_is_asked(client: TestClient) -> None:
    response = client.post(
        "/v1/encode/foo/bar", content=b"{}", headers={"content-type": MSGPACK, "accept": MSGPACK}
    )
    assert response.status_code == 404
    assert error_of(response) == ("MODEL_NOT_FOUND", "Model 'foo/bar' not found")
    response = client.post(
        f"/v1/encode/{MINILM}", content=b"\xc1", headers={"content-type": MSGPACK, "accept": MSGPACK}
    )
    assert response.status_code == 400 and error_of(response)[0] == "INVALID_INPUT"


def test_wrong_method_is_405_with_allow(client: TestClient) -> None:
    response = client.get(f"/v1/encode/{MINILM}")
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]
    response = client.post("/v1/models")
    assert response.status_code == 405 and "GET" in response.headers["allow"]


def test_body_over_limit_is_413(client: TestClient, devices: FakeDevices) -> None:
    response = post_encode(client, MINILM, {"items": [{"text": "x" * 200_000}]})
    assert response.status_code == 413
    assert error_of(response)[0] == "INPUT_TOO_LONG"
    assert devices.batches == []


# -- model states and device failures ----------------------------------------------------------------


def test_available_model_is_loaded_on_request(client: TestClient, devices: FakeDevices) -> None:
    slot = devices.catalog.slot(ODD)
    devices.states[slot] = ModelState.AVAILABLE
    for expected_calls in (1, 2):
        response = post_encode(client, ODD, {"items": [{"text": "x"}]})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        assert error_of(response)[0] == "MODEL_LOADING"
        assert devices.load_requests == [slot] * expected_calls
    assert client.get(f"/v1/models/{ODD}").json()["state"] == "available"
    assert devices.batches == []


def test_the_tokenizer_loads_while_the_device_loads_the_model(
    client: TestClient, devices: FakeDevices, state: FrontendState
) -> None:
    slot = devices.catalog.slot(ODD)
    devices.states[slot] = ModelState.LOADING
    config = devices.catalog.get(ODD)
    assert not state.tokenizers.is_loaded(config)
    response = post_encode(client, ODD, {"items": [{"text": "x"}]})
    assert response.status_code == 503 and error_of(response)[0] == "MODEL_LOADING"
    deadline = time.monotonic() + 10
    while not state.tokenizers.is_loaded(config) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state.tokenizers.is_loaded(config)  # before any request of it was admitted
    assert devices.batches == []


def test_text_state_of_a_model_no_device_holds_leaves_once_idle(
    client: TestClient, devices: FakeDevices, state: FrontendState
) -> None:
    """A frontend drops a model's tokenizer once it is idle here and no device holds or loads it;
    preloaded and loaded models keep theirs, and the next request reads the files anew."""
    minilm, odd = (devices.catalog.get(name) for name in (MINILM, ODD))
    for text in ("first", "second"):  # both models served here
        assert post_encode(client, ODD, {"items": [{"text": text}]}).status_code == 200
        assert post_encode(client, MINILM, {"items": [{"text": text}]}).status_code == 200
    assert state.tokenizers.is_loaded(odd) and state.tokenizers.is_loaded(minilm)
    assert state.release_idle_text_state(idle_s=3600) == []  # used just now
    for held in (ModelState.LOADED, ModelState.LOADING):
        devices.states[devices.catalog.slot(ODD)] = held
        assert state.release_idle_text_state(idle_s=0) == []
    devices.states[devices.catalog.slot(ODD)] = ModelState.AVAILABLE
    devices.states[devices.catalog.slot(MINILM)] = ModelState.AVAILABLE  # but preloaded
    assert state.release_idle_text_state(idle_s=0) == [ODD]
    assert not state.tokenizers.is_loaded(odd) and state.tokenizers.is_loaded(minilm)
    devices.states[devices.catalog.slot(ODD)] = ModelState.LOADED
    response = post_encode(client, ODD, {"items": [{"text": "first"}]})
    assert response.status_code == 200 and state.tokenizers.is_loaded(odd)


def test_a_quiet_frontend_releases_idle_text_state_on_its_own(
    client: TestClient, devices: FakeDevices, state: FrontendState
) -> None:
    """The release runs on a timer, not on requests: a frontend with no traffic lets go too."""
    from sie.frontend.serve import release_idle_text_state

    odd = devices.catalog.get(ODD)
    assert post_encode(client, ODD, {"items": [{"text": "x"}]}).status_code == 200
    devices.states[devices.catalog.slot(ODD)] = ModelState.AVAILABLE

    async def quiet_while_the_timer_runs() -> None:
        timer = asyncio.create_task(release_idle_text_state(state, every_s=0.01, idle_s=0))
        deadline = time.monotonic() + 5
        while state.tokenizers.is_loaded(odd) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        timer.cancel()

    assert state.tokenizers.is_loaded(odd)
    asyncio.run(quiet_while_the_timer_runs())
    assert not state.tokenizers.is_loaded(odd)


def test_loading_model_is_503_without_another_load(client: TestClient, devices: FakeDevices) -> None:
    slot = devices.catalog.slot(ODD)
    devices.states[slot] = ModelState.LOADING
    response = post_encode(client, ODD, {"items": [{"text": "x"}]})
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert error_of(response)[0] == "MODEL_LOADING"
    assert devices.load_requests == []
    info = client.get(f"/v1/models/{ODD}").json()
    assert (info["state"], info["loaded"]) == ("loading", False)


def test_failed_model_is_502_and_listed_with_its_error(client: TestClient, devices: FakeDevices) -> None:
    slot = devices.catalog.slot(ODD)
    devices.states[slot] = ModelState.FAILED
    devices.errors[slot] = "OSError: no weights"
    response = post_encode(client, ODD, {"items": [{"text": "x"}]})
    assert response.status_code == 502
    assert "retry-after" not in response.headers
    code, message = error_of(response)
    assert code == "MODEL_LOAD_FAILED" and "OSError: no weights" in message
    info = client.get(f"/v1/models/{ODD}").json()
    assert info["state"] == "failed" and info["loaded"] is False
    assert info["last_error"] == {"code": "MODEL_LOAD_FAILED", "message": "OSError: no weights"}
    assert devices.load_requests == []
    # The other model is unaffected.
    assert post_encode(client, MINILM, {"items": [{"text": "x"}]}).status_code == 200


def test_failed_model_is_retried_once_its_cool_down_has_passed(
    client: TestClient, devices: FakeDevices
) -> None:
    slot = devices.catalog.slot(ODD)
    devices.states[slot] = ModelState.FAILED
    devices.retry_allowed.add(slot)
    response = post_encode(client, ODD, {"items": [{"text": "x"}]})
    assert (response.status_code, response.headers["retry-after"]) == (503, "5")
    assert error_of(response)[0] == "MODEL_LOADING"
    assert devices.load_requests == [slot]


@pytest.mark.parametrize("where", ["devices", "state"])
def test_draining_is_503_shutting_down(
    client: TestClient, devices: FakeDevices, state: FrontendState, where: str
) -> None:
    if where == "devices":
        devices.draining = True
    else:
        state.is_draining = True
    response = post_encode(client, MINILM, {"items": [{"text": "x"}]})
    assert response.status_code == 503 and response.headers["retry-after"] == "5"
    assert error_of(response)[0] == "SHUTTING_DOWN"
    ready = client.get("/readyz")
    assert (ready.status_code, ready.text) == (503, "not ready")
    assert devices.batches == []


@pytest.mark.parametrize(
    ("error", "status", "code", "retry_after"),
    [
        (DeviceUnavailable("Device failed; retry shortly"), 503, "DEVICE_UNAVAILABLE", "1"),
        (QueueFull("full"), 503, "QUEUE_FULL", "1"),
        (InputTooLong("too big for the ring"), 413, "INPUT_TOO_LONG", None),
    ],
)
def test_device_errors_map_to_the_table(
    client: TestClient, devices: FakeDevices, error: SieError, status: int, code: str, retry_after: str | None
) -> None:
    devices.encode_error = error
    response = post_encode(client, MINILM, {"items": [{"text": "x"}]}, accept=MSGPACK)
    assert response.status_code == status
    assert response.headers.get("retry-after") == retry_after
    assert error_of(response) == (code, error.message)


def test_unexpected_error_is_500_json(client: TestClient, devices: FakeDevices) -> None:
    devices.encode_error = RuntimeError("boom")  # type: ignore[assignment]
    response = post_encode(client, MINILM, {"items": [{"text": "x"}]})
    assert response.status_code == 500
    assert error_of(response)[0] in ("INTERNAL_ERROR", "INFERENCE_ERROR")


# -- probes, catalogue, openapi, openai ----------------------------------------------------------------


def test_probes(client: TestClient, devices: FakeDevices) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        response = client.get(path)
        assert (response.status_code, response.text) == (200, "ok")
        assert response.headers["content-type"].startswith("text/plain")
    devices.ready = False
    ready = client.get("/readyz")
    assert (ready.status_code, ready.text) == (503, "not ready")
    assert client.get("/healthz").status_code == 200 and client.get("/livez").status_code == 200


def test_models_list_shape(client: TestClient, devices: FakeDevices) -> None:
    response = client.get("/v1/models", headers={"accept": MSGPACK})
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    models = {m["name"]: m for m in response.json()["models"]}
    assert set(models) == {MINILM, ODD, f"{ODD}:fast", UNSUPPORTED}  # each served profile's own id
    unsupported = models.pop(UNSUPPORTED)
    assert unsupported["supported"] is False and unsupported["state"] == "failed"
    assert unsupported["unsupported_reason"] == UNSUPPORTED_REASON
    assert unsupported["last_error"] == {"code": "MODEL_LOAD_FAILED", "message": UNSUPPORTED_REASON}
    assert client.get(f"/v1/models/{UNSUPPORTED}").json()["unsupported_reason"] == UNSUPPORTED_REASON
    for info in models.values():
        assert set(info) == MODEL_INFO_KEYS
        assert info["state"] == "loaded" and info["loaded"] is True and info["last_error"] is None
    minilm = models[MINILM]
    assert minilm["inputs"] == ["text"] and minilm["outputs"] == ["dense"]
    assert minilm["dims"] == {"dense": 384} and minilm["max_sequence_length"] == 256
    assert minilm["profiles"] == {"default": {"is_default": True}}
    assert models[ODD]["profiles"] == {"default": {"is_default": True}, "fast": {"is_default": False}}
    assert models[ODD]["dims"] == {"dense": 16}
    fast = models[f"{ODD}:fast"]  # as SIE lists a variant: its profile alone, as the default
    assert fast["profiles"] == {"default": {"is_default": True}} and fast["unsupported_profiles"] is None
    assert {k: v for k, v in fast.items() if k not in ("name", "profiles", "unsupported_profiles")} == {
        k: v for k, v in models[ODD].items() if k not in ("name", "profiles", "unsupported_profiles")
    }
    assert client.get(f"/v1/models/{ODD}:fast").json()["name"] == f"{ODD}:fast"
    missing = client.get("/v1/models/foo/bar")
    assert missing.status_code == 404
    assert error_of(missing) == ("MODEL_NOT_FOUND", "Model 'foo/bar' not found")


def test_a_profile_qualified_id_runs_that_profile_on_the_same_model(
    client: TestClient, devices: FakeDevices
) -> None:
    """`<id>:<profile>` (SIE's variant ids) is the model under that profile: ODD's default profile does
    not normalize, its `fast` one does; the response echoes the id as sent."""
    body = {"items": [{"text": "first text"}, {"text": "another"}]}
    texts = ["first text", "another"]
    raw, unit = expected_rows(devices, texts, ODD, normalize=False), expected_rows(devices, texts, ODD)
    cases = [
        (f"{ODD}:fast", {}, unit),
        (f"{ODD}:fast", {"profile": "fast"}, unit),
        (f"{ODD}:fast", {"profile": "default"}, unit),  # the variant's own profile, as in SIE
        (f"{ODD}:default", {}, raw),
        (ODD, {"profile": "fast"}, unit),
    ]
    for name, options, want in cases:
        response = post_encode(client, name, {**body, "params": {"options": options}}, **JSON_ACCEPT)
        assert response.status_code == 200, (name, options, response.text)
        payload = response.json()
        assert payload["model"] == name
        got = np.array([item["dense"]["values"] for item in payload["items"]], np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{name} {options}")
    slots = {batch.model_slot for batch in devices.batches}
    assert slots == {devices.catalog.slot(ODD)}  # one model, one instance, whatever the id
    clash = post_encode(client, f"{ODD}:fast", {**body, "params": {"options": {"profile": "nope"}}})
    assert clash.status_code == 400 and "names profile 'fast'" in error_of(clash)[1]
    refused = post_encode(client, f"{ODD}:banking", body)
    assert refused.status_code == 400 and "lora_id" in error_of(refused)[1]
    for unknown in (f"{ODD}:slow", f"{MINILM}:fast", f"{UNSUPPORTED}x:default"):
        response = post_encode(client, unknown, body)
        assert response.status_code == 404, unknown
        assert error_of(response) == ("MODEL_NOT_FOUND", f"Model '{unknown}' not found")
    unsupported = post_encode(client, f"{UNSUPPORTED}:default", body)
    assert unsupported.status_code == 502 and UNSUPPORTED_REASON in error_of(unsupported)[1]


def test_unsupported_model_and_refused_profile_say_why(client: TestClient) -> None:
    body = {"items": [{"text": "hi"}]}
    refused = client.post(f"/v1/encode/{UNSUPPORTED}", json=body)
    assert refused.status_code == 502
    code, message = error_of(refused)
    assert code == "MODEL_LOAD_FAILED" and UNSUPPORTED_REASON in message
    profile = client.post(f"/v1/encode/{ODD}", json={**body, "params": {"options": {"profile": "banking"}}})
    assert profile.status_code == 400 and "lora_id" in error_of(profile)[1]


def test_openapi_is_valid_json_with_paths(client: TestClient) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    doc = json.loads(response.content)
    assert doc["openapi"].startswith("3.")
    assert {
        "/v1/encode/{model}",
        "/v1/embeddings",
        "/v1/models",
        "/v1/models/{model}",
        "/healthz",
        "/readyz",
    } <= set(doc["paths"])
    ref = doc["paths"]["/v1/encode/{model}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert ref["$ref"].rsplit("/", 1)[1] in doc["components"]["schemas"]


def test_openai_embeddings_and_errors(client: TestClient, devices: FakeDevices) -> None:
    response = client.post("/v1/embeddings", json={"model": MINILM, "input": ["a b", "c"]})
    assert response.status_code == 200, response.text
    payload = response.json()
    np.testing.assert_allclose(
        [d["embedding"] for d in payload["data"]], expected_rows(devices, ["a b", "c"]), rtol=1e-6, atol=1e-7
    )
    assert [d["index"] for d in payload["data"]] == [0, 1]
    missing = client.post("/v1/embeddings", json={"model": "foo/bar", "input": "x"})
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "model_not_found" and error["type"] == "invalid_request_error"
    empty = client.post("/v1/embeddings", json={"model": MINILM, "input": []})
    assert empty.status_code == 400 and set(empty.json()["error"]) == {"message", "type", "param", "code"}
    devices.states[devices.catalog.slot(MINILM)] = ModelState.LOADING
    loading = client.post("/v1/embeddings", json={"model": MINILM, "input": "x"})
    assert loading.status_code == 503 and loading.headers["retry-after"] == "5"
    assert "error" in loading.json()
