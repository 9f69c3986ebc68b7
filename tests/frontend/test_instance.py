"""What a balancer and its operator see of one server: X-SIE-Instance and where each model sits."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from sie.catalog import Catalog, load_catalog
from sie.frontend.app import build_app
from sie.frontend.devices import Placement
from sie.frontend.instance import instance_id
from sie.frontend.results import Results
from sie.frontend.state import FrontendState
from sie.settings import Settings
from sie.shm.control import ModelState, ModelUsage
from sie.shm.layout import TokenBatch

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


class PlacedDevices:
    """A `Devices` fake holding only model placements; `broken` makes every state read raise."""

    def __init__(self) -> None:
        self.placed: dict[int, list[Placement]] = {}
        self.broken = False

    def is_draining(self) -> bool:
        return False

    def model_state(self, slot: int) -> ModelState:
        if self.broken:
            raise RuntimeError("control block gone")
        return ModelState.LOADED if self.placed.get(slot) else ModelState.AVAILABLE

    def placements(self, slot: int) -> list[Placement]:
        return self.placed.get(slot, [])

    def model_error(self, slot: int) -> str:
        return ""

    def is_ready(self, preload_slots: list[int]) -> bool:
        return True

    def can_retry_load(self, slot: int) -> bool:
        return False

    def loads(self, slot: int) -> int:
        return 1

    def request_load(self, slot: int) -> None:
        pass

    async def submit(self, batch: TokenBatch) -> Results:
        raise AssertionError("not used here")


@pytest.fixture
def devices() -> PlacedDevices:
    return PlacedDevices()


@pytest.fixture
def client(devices: PlacedDevices) -> Iterator[TestClient]:
    catalog = Catalog([load_catalog().get(MINILM)])
    state = FrontendState(settings=Settings(instance="gpu-a"), catalog=catalog, devices=devices)
    with TestClient(build_app(state), raise_server_exceptions=False) as test_client:
        yield test_client


def test_instance_id_names_the_host_too() -> None:
    assert instance_id("main", "box-1") == "main@box-1"
    assert instance_id("gpu-a").startswith("gpu-a@")


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/healthz", 200),
        ("GET", "/readyz", 200),
        ("GET", "/v1/models", 200),
        ("GET", "/v1/models/no/such-model", 404),  # SieError
        ("GET", "/no-such-route", 404),  # Starlette's HTTPException
        ("DELETE", "/v1/models", 405),
        ("POST", f"/v1/encode/{MINILM}", 400),  # no body
    ],
)
def test_every_response_names_the_instance(client: TestClient, method: str, path: str, status: int) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert response.headers["x-sie-instance"] == instance_id("gpu-a")


def test_an_unexpected_500_names_the_instance_too(client: TestClient, devices: PlacedDevices) -> None:
    # ServerErrorMiddleware, outside every user middleware, answers this one.
    devices.broken = True
    response = client.get("/v1/models")
    assert response.status_code == 500
    assert response.headers["x-sie-instance"] == instance_id("gpu-a")


def test_models_say_where_each_model_sits(client: TestClient, devices: PlacedDevices) -> None:
    used_ns = time.monotonic_ns() - 2_000_000_000
    devices.placed[0] = [
        Placement("cuda:0", ModelState.LOADED, ModelUsage(123_000, used_ns, 7)),
        Placement("cuda:1", ModelState.LOADING, ModelUsage(0, 0, 1)),
    ]
    info = client.get(f"/v1/models/{MINILM}").json()
    assert info["state"] == "loaded" and info["instance"] == instance_id("gpu-a")
    assert (info["device"], info["memory_bytes"], info["queue_depth"]) == ("cuda:0,cuda:1", 123_000, 8)
    assert info["last_used"] == pytest.approx(time.time() - 2.0, abs=0.5)  # Unix seconds
    devices.placed.clear()
    (listed,) = client.get("/v1/models").json()["models"]
    assert listed["state"] == "available" and listed["instance"] == instance_id("gpu-a")
    assert (listed["device"], listed["memory_bytes"], listed["last_used"], listed["queue_depth"]) == (
        None,
        0,
        None,
        0,
    )
