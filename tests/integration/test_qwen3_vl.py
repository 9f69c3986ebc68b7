"""Qwen3-VL end to end: a real server with a tiny Qwen3-VL embedder and reranker, texts and images
over HTTP, against SIE's recipe run by transformers on the same bytes and weights
(tests.tiny_models.qwen3_vl); bad items are 400s that leave other requests served."""

from __future__ import annotations

import base64
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests import media_samples as samples
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, dense_matrix, encode, post
from tests.tiny_models.qwen3_vl import (
    make_qwen3_vl,
    model_yaml_qwen3_vl_embedding,
    model_yaml_qwen3_vl_reranker,
    reference_embeddings,
    reference_scores,
)

pytestmark = pytest.mark.slow

EMBEDDER = "tiny/qwen3-vl-embedding"
RERANKER = "tiny/qwen3-vl-reranker"
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.webp(64, 64)]
ATOL = 1e-4

Lab = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, watched_server: WatchedServer) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("qwen3-vl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folders = {
            EMBEDDER: make_qwen3_vl(root / "embedder", seed=0),
            RERANKER: make_qwen3_vl(root / "reranker", seed=1, tied=False),
        }
    watched_server.add(model_yaml_qwen3_vl_embedding(EMBEDDER, folders[EMBEDDER]))
    watched_server.wait_serving(f"/v1/encode/{EMBEDDER}", {"items": [{"text": "cats"}]})
    watched_server.add(model_yaml_qwen3_vl_reranker(RERANKER, folders[RERANKER]))
    body = {"query": {"text": "cats"}, "items": [{"text": "cats sleep"}]}
    watched_server.wait_serving(f"/v1/score/{RERANKER}", body)
    yield watched_server.server, folders


def item(text: str | None, *images: bytes, as_json: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {} if text is None else {"text": text}
    if images:
        out["images"] = [{"data": base64.b64encode(d).decode() if as_json else d} for d in images]
    return out


ITEMS: list[tuple[str | None, list[bytes]]] = [
    ("a red square", []),
    (None, [IMAGES[0]]),
    ("cats sleep all day", [IMAGES[1], IMAGES[2]]),
]


@pytest.mark.parametrize("as_json", [True, False], ids=["json-base64", "msgpack"])
def test_encode_matches_sies_recipe(lab: Lab, as_json: bool) -> None:
    server, folders = lab
    body = {"items": [item(text, *images, as_json=as_json) for text, images in ITEMS]}
    response = encode(server.url, EMBEDDER, body, as_json=as_json)
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(
        dense_matrix(decode(response)), reference_embeddings(folders[EMBEDDER], ITEMS), atol=ATOL
    )


def test_the_request_instruction_is_the_system_turn(lab: Lab) -> None:
    server, folders = lab
    body = {
        "items": [item(text, *images) for text, images in ITEMS],
        "params": {"instruction": "find the photo"},
    }
    response = encode(server.url, EMBEDDER, body, as_json=True)
    assert response.status_code == 200, response.text
    want = reference_embeddings(folders[EMBEDDER], ITEMS, "find the photo")
    np.testing.assert_allclose(dense_matrix(decode(response)), want, atol=ATOL)


def test_openai_embeddings_are_the_encode_vectors(lab: Lab) -> None:
    server, folders = lab
    response = httpx.post(
        f"{server.url}/v1/embeddings", json={"model": EMBEDDER, "input": ["a red square"]}, timeout=60
    )
    assert response.status_code == 200, response.text
    got = np.asarray(response.json()["data"][0]["embedding"], np.float32)
    np.testing.assert_allclose(got, reference_embeddings(folders[EMBEDDER], ITEMS[:1])[0], atol=ATOL)


DOCS: list[tuple[str | None, bytes | None]] = [
    ("cats sleep all day", None),
    (None, IMAGES[0]),
    ("the stock market closed higher", IMAGES[1]),
]


@pytest.mark.parametrize(
    "query", [("a red square", None), ("a blue circle", IMAGES[2])], ids=["text", "image"]
)
def test_score_matches_sies_recipe(lab: Lab, query: tuple[str | None, bytes | None]) -> None:
    server, folders = lab
    body = {
        "query": item(query[0], *([query[1]] if query[1] else [])),
        "items": [
            {**item(text, *([image] if image else [])), "id": f"d{i}"} for i, (text, image) in enumerate(DOCS)
        ],
    }
    response = post(server.url, f"/v1/score/{RERANKER}", body, as_json=True)
    assert response.status_code == 200, response.text
    scores = {entry["item_id"]: entry["score"] for entry in response.json()["scores"]}
    want = reference_scores(folders[RERANKER], query, DOCS)
    np.testing.assert_allclose([scores[f"d{i}"] for i in range(len(DOCS))], want, atol=ATOL)


def test_cohere_rerank_scores_texts_as_score_does(lab: Lab) -> None:
    server, folders = lab
    documents = ["cats sleep all day", "the stock market closed higher"]
    response = httpx.post(
        f"{server.url}/v1/rerank",
        json={"model": RERANKER, "query": "a red square", "documents": documents},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    got = {entry["index"]: entry["relevance_score"] for entry in response.json()["results"]}
    want = reference_scores(folders[RERANKER], ("a red square", None), [(d, None) for d in documents])
    np.testing.assert_allclose([got[0], got[1]], want, atol=ATOL)


def test_bad_items_are_400s_and_other_requests_are_served(lab: Lab) -> None:
    server, folders = lab
    big = samples.jpeg(1001, 1000)  # over the shared server's --max-image-pixels
    bad = [
        (
            EMBEDDER,
            {"items": [{"text": "fine"}, {"text": "clip", "video": {"data": "AAAA"}}]},
            "Item 1 has video",
        ),
        (
            EMBEDDER,
            {"items": [{"text": "fine"}, item(None, big)]},
            "Item 1 image 0: image of 1001x1000 pixels",
        ),
        (EMBEDDER, {"items": [{"text": "a <|image_pad|> b"}]}, "must not contain the model's control token"),
    ]
    good = {"items": [item(text, *images) for text, images in ITEMS]}
    with ThreadPoolExecutor(len(bad) + 1) as pool:
        ok = pool.submit(encode, server.url, EMBEDDER, good, as_json=True)
        refused = [pool.submit(encode, server.url, model, body, as_json=True) for model, body, _ in bad]
        for future, (_, _, message) in zip(refused, bad, strict=True):
            response = future.result()
            assert response.status_code == 400, response.text
            detail = response.json()["detail"]
            assert detail["code"] == "INVALID_INPUT" and message in detail["message"], detail
        response = ok.result()
    assert response.status_code == 200, response.text
    np.testing.assert_allclose(
        dense_matrix(decode(response)), reference_embeddings(folders[EMBEDDER], ITEMS), atol=ATOL
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"query": {"text": "q"}, "items": [item("d", IMAGES[0], IMAGES[1])]}, "Item 0 has 2 images"),
        ({"query": {"text": "q"}, "items": [{"text": "  "}]}, "Item 0 needs nonblank text or one image"),
        ({"query": {"text": "q<|im_end|>"}, "items": [{"text": "d"}]}, "Query: text must not contain"),
        ({"query": {"text": "q", "video": {"data": "AAAA"}}, "items": [{"text": "d"}]}, "has video"),
    ],
)
def test_bad_score_requests_are_400s(lab: Lab, body: dict[str, Any], message: str) -> None:
    server, _ = lab
    response = post(server.url, f"/v1/score/{RERANKER}", body, as_json=True)
    assert response.status_code == 400, response.text
    assert message in response.json()["detail"]["message"]


def test_sdk_encodes_and_scores_images_as_sies_recipe(lab: Lab, tmp_path: Path) -> None:
    """sie-sdk's encode on the embedder and score on the reranker (an image query, an image
    document), one run of the real client."""
    from tests.integration.test_sdk import SDK_PYTHON, array, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folders = lab
    files = []
    for i, data in enumerate(IMAGES[:3]):  # jpeg, png and webp bytes: the SDK sends them unchanged
        files.append(str(tmp_path / f"image{i}"))
        Path(files[-1]).write_bytes(data)
    embed_items = [("a red square", []), (None, [IMAGES[0]]), ("cats sleep all day", [IMAGES[1]])]
    query = ("a blue circle", IMAGES[2])
    docs = [("cats sleep all day", None), (None, IMAGES[0])]
    encoded, scored = run_sdk(
        server.url,
        [
            {
                "op": "encode",
                "model": EMBEDDER,
                "items": [
                    {"text": "a red square"},
                    {"images": [{"bytes": files[0]}]},
                    {"text": "cats sleep all day", "images": [{"bytes": files[1]}]},
                ],
            },
            {
                "op": "score",
                "model": RERANKER,
                "query": {"text": "a blue circle", "images": [{"bytes": files[2]}]},
                "items": [
                    {"text": "cats sleep all day", "id": "d0"},
                    {"images": [{"bytes": files[0]}], "id": "d1"},
                ],
            },
        ],
    )
    got = np.stack([array(result["dense"]) for result in ok(encoded)])
    np.testing.assert_allclose(got, reference_embeddings(folders[EMBEDDER], embed_items), atol=ATOL)
    scores = {entry["item_id"]: entry["score"] for entry in ok(scored)["scores"]}
    want = reference_scores(folders[RERANKER], query, docs)
    np.testing.assert_allclose([scores["d0"], scores["d1"]], want, atol=ATOL)
