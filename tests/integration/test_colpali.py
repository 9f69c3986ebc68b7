"""ColPali end to end: a real server with the tiny ColPali (the media server), pages and queries over
HTTP, against transformers' ColPaliProcessor + ColPaliForRetrieval on the same bytes and weights."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from sie.frontend.muvera import MuveraParams, fde
from tests import media_samples as samples
from tests.integration.media_models import COLPALI, MAX_PIXELS
from tests.integration.server import Server
from tests.integration.wire import decode, encode, post
from tests.tiny_models.colpali import reference_images, reference_queries

pytestmark = pytest.mark.slow

IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.webp(64, 64)]
QUERY = "What is the revenue in 2023?"
ATOL = 1e-4

Media = tuple[Server, dict[str, Path]]


def page(*images: bytes, as_json: bool, **extra: Any) -> dict[str, Any]:
    wire = [{"data": base64.b64encode(data).decode() if as_json else data} for data in images]
    return {"images": wire, **extra}


def multivectors(response: httpx.Response) -> list[np.ndarray]:
    assert response.status_code == 200, response.text
    out = []
    for item in decode(response)["items"]:
        entry = item["multivector"]
        matrix = np.asarray(entry["values"], np.float32).reshape(entry["num_tokens"], entry["token_dims"])
        out.append(matrix)
    return out


@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_pages_and_a_query_match_transformers(media: Media, as_json: bool) -> None:
    server, folders = media
    items = [page(IMAGES[0], as_json=as_json), {"text": QUERY}, page(IMAGES[1], IMAGES[2], as_json=as_json)]
    body = {"items": items, "params": {"output_types": ["multivector"]}}
    got = multivectors(encode(server.url, COLPALI, body, as_json=as_json))
    pages = reference_images(folders[COLPALI], IMAGES)
    want = [pages[0], reference_queries(folders[COLPALI], [QUERY])[0], np.concatenate(pages[1:])]
    for mine, theirs in zip(got, want, strict=True):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, atol=ATOL)


def test_score_is_maxsim_against_the_reference_vectors(media: Media) -> None:
    import torch
    import transformers

    server, folders = media
    items = [page(data, as_json=True, id=f"p{i}") for i, data in enumerate(IMAGES)]
    response = post(
        server.url, f"/v1/score/{COLPALI}", {"query": {"text": QUERY}, "items": items}, as_json=True
    )
    assert response.status_code == 200, response.text
    scores = {entry["item_id"]: entry["score"] for entry in response.json()["scores"]}
    processor = transformers.ColPaliProcessor.from_pretrained(folders[COLPALI])
    want = processor.score_retrieval(
        [torch.from_numpy(reference_queries(folders[COLPALI], [QUERY])[0])],
        [torch.from_numpy(m) for m in reference_images(folders[COLPALI], IMAGES)],
    )[0].numpy()
    np.testing.assert_allclose([scores[f"p{i}"] for i in range(len(IMAGES))], want, atol=1e-3)


def test_muvera_dense_is_the_fde_of_the_page_vectors(media: Media) -> None:
    server, _ = media
    params = {"num_repetitions": 4, "final_projection_dim": 256}
    for is_query, item in ((True, {"text": QUERY}), (False, page(IMAGES[0], as_json=False))):
        options = {"is_query": is_query, "muvera": params}
        body = {"items": [item], "params": {"output_types": ["dense", "multivector"], "options": options}}
        response = encode(server.url, COLPALI, body, as_json=False)
        vectors = multivectors(response)
        dense = np.asarray(decode(response)["items"][0]["dense"]["values"], np.float32)
        want = fde(
            vectors, is_query=is_query, params=MuveraParams(num_repetitions=4, final_projection_dim=256)
        )
        np.testing.assert_allclose(dense, want[0], atol=1e-5)


def test_an_oversized_page_is_a_400(media: Media) -> None:
    server, _ = media
    big = samples.jpeg(1001, 1000)
    assert MAX_PIXELS < 1001 * 1000
    body = {
        "items": [{"text": "fine"}, page(big, as_json=False)],
        "params": {"output_types": ["multivector"]},
    }
    for response in (
        encode(server.url, COLPALI, body, as_json=False),
        post(
            server.url,
            f"/v1/score/{COLPALI}",
            {"query": {"text": QUERY}, "items": body["items"]},
            as_json=False,
        ),
    ):
        assert response.status_code == 400, response.text
        detail = decode(response)["detail"]
        assert detail["code"] == "INVALID_INPUT"
        assert "Item 1 image 0: image of 1001x1000 pixels is over the limit" in detail["message"]


def test_sdk_encodes_and_scores_as_transformers(media: Media, tmp_path: Path) -> None:
    """sie-sdk's encode (a page and a query) and score (MaxSim), one run of the real client."""
    import torch
    import transformers

    from tests.integration.test_sdk import SDK_PYTHON, array, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folders = media
    files = []
    for i, data in enumerate(IMAGES[:2]):  # jpeg and png bytes: the SDK sends them unchanged
        files.append(tmp_path / f"page{i}")
        files[-1].write_bytes(data)
    pages = [{"images": [{"bytes": str(f)}]} for f in files]
    encoded, scored = run_sdk(
        server.url,
        [
            {
                "op": "encode",
                "model": COLPALI,
                "items": [pages[0], {"text": QUERY}],
                "kwargs": {"output_types": ["multivector"]},
            },
            {
                "op": "score",
                "model": COLPALI,
                "query": {"text": QUERY},
                "items": [{**p, "id": f"p{i}"} for i, p in enumerate(pages)],
            },
        ],
    )
    page_vectors = reference_images(folders[COLPALI], IMAGES[:2])
    query_vectors = reference_queries(folders[COLPALI], [QUERY])[0]
    for result, want in zip(ok(encoded), [page_vectors[0], query_vectors], strict=True):
        got = array(result["multivector"])
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=ATOL)
    scores = {entry["item_id"]: entry["score"] for entry in ok(scored)["scores"]}
    want_scores = transformers.ColPaliProcessor.from_pretrained(folders[COLPALI]).score_retrieval(
        [torch.from_numpy(query_vectors)], [torch.from_numpy(m) for m in page_vectors]
    )[0]
    np.testing.assert_allclose([scores["p0"], scores["p1"]], want_scores.numpy(), atol=1e-3)
