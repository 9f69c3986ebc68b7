"""SIE's fake model served end to end: its profiles as models of their own, and its bad days (an
out-of-memory forward, a slow load) each ending with the right answer and the server serving."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.integration.server import Server, wait_until

pytestmark = pytest.mark.slow

TOO_LONG = 40  # code points: sie-fake:small-a fails to allocate for a forward over this many
SLOW_LOAD_S = 1.0
MODELS = ["sie-fake", "sie-fake:small-a", "sie-fake:oom-3rd", "sie-fake:slow-load", "sie-fake:small-b"]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    faults = {
        "sie-fake:small-a": {"oom_over_tokens": TOO_LONG},
        "sie-fake:slow-load": {"slow_load_s": SLOW_LOAD_S},
        "sie-fake:small-b": {"oom_on_dispatch": 2},
    }
    started = Server(
        "--models",
        ",".join(MODELS),
        "--preload",
        ",".join(MODELS[:3]),
        "--max-batch-wait-ms",
        "30",  # concurrent requests share a batch
        frontends=1,
        env={"SIE_FAKE_FAULTS": json.dumps(faults)},
    ).wait_ready()
    yield started
    assert started.stop() == 0, started.log()


def encode(server: Server, model: str, texts: list[str]) -> httpx.Response:
    body = {"items": [{"text": text} for text in texts]}
    return httpx.post(
        f"{server.url}/v1/encode/{model}", json=body, headers={"accept": "application/json"}, timeout=30
    )


def dense(response: httpx.Response) -> np.ndarray:
    assert response.status_code == 200, response.text
    return np.array([item["dense"]["values"] for item in response.json()["items"]], np.float32)


def test_each_profile_is_a_model_answering_like_the_base(server: Server) -> None:
    listed = httpx.get(f"{server.url}/v1/models", timeout=10).json()["models"]
    assert {m["name"] for m in listed} == set(MODELS)
    texts = ["hello world", "", "日本語"]
    base = dense(encode(server, "sie-fake", texts))
    assert base.shape == (3, 384)
    np.testing.assert_array_equal(dense(encode(server, "sie-fake:small-a", texts)), base)  # one hash
    scored = httpx.post(
        f"{server.url}/v1/score/sie-fake",
        json={"query": {"text": "q"}, "items": [{"text": "a"}, {"text": "b"}]},
        headers={"accept": "application/json"},
        timeout=30,
    ).json()
    assert all(0 <= s["score"] < 1 for s in scored["scores"]) and scored["usage"]["input_tokens"] == 4


def test_the_request_that_never_fits_gets_503_and_its_batch_mates_their_vectors(server: Server) -> None:
    short = [[f"short text {i}"] for i in range(4)]
    long = ["y" * (TOO_LONG + 1)]
    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(encode, server, "sie-fake:small-a", texts) for texts in [*short, long]]
        answers = [f.result() for f in futures]
    refused = answers[-1]
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json()["detail"]["code"] == "RESOURCE_EXHAUSTED"
    for texts, answer in zip(short, answers, strict=False):
        np.testing.assert_array_equal(dense(answer), dense(encode(server, "sie-fake", texts)))


def test_out_of_memory_again_and_again_leaves_memory_flat(server: Server) -> None:
    (device,) = server.roles()["device"]
    encode(server, "sie-fake:small-a", ["y" * (TOO_LONG + 1)])
    before = _rss(device)
    codes = {encode(server, "sie-fake:small-a", ["z" * (TOO_LONG + 5)]).status_code for _ in range(40)}
    assert codes == {503}
    assert _rss(device) - before < 16 << 20
    assert dense(encode(server, "sie-fake:small-a", ["still serving"])).shape == (1, 384)


def test_the_third_forward_failing_is_recovered_in_halves(server: Server) -> None:
    for text in ("first", "second"):
        dense(encode(server, "sie-fake:oom-3rd", [text]))
    texts = ["one", "two", "three", "four"]  # the 3rd forward: fails whole, answered in halves
    np.testing.assert_array_equal(
        dense(encode(server, "sie-fake:oom-3rd", texts)), dense(encode(server, "sie-fake", texts))
    )


def test_a_single_item_whose_forward_fails_once_is_answered_by_the_retry(server: Server) -> None:
    # As SIE's ladder: the cache freed, the same batch again, before any split or refusal.
    wait_until(lambda: encode(server, "sie-fake:small-b", ["first"]).status_code == 200, 15, "small-b loaded")
    np.testing.assert_array_equal(
        dense(encode(server, "sie-fake:small-b", ["second"])), dense(encode(server, "sie-fake", ["second"]))
    )


def test_a_slow_load_answers_503_model_loading_at_once_then_serves(server: Server) -> None:
    started = time.monotonic()
    first = encode(server, "sie-fake:slow-load", ["x"])
    assert first.status_code == 503 and first.json()["detail"]["code"] == "MODEL_LOADING"
    assert time.monotonic() - started < SLOW_LOAD_S / 2  # told to retry, not held
    wait_until(lambda: encode(server, "sie-fake:slow-load", ["x"]).status_code == 200, 15, "the slow load")
    assert time.monotonic() - started >= SLOW_LOAD_S


def _rss(pid: int) -> int:
    fields = Path(f"/proc/{pid}/statm").read_text().split()
    return int(fields[1]) * 4096
