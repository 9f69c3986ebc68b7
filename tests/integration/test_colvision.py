"""ColQwen2.5, ColQwen3 and ColSmol end to end: a real server with the three tiny models (LoRA
folders over their base checkpoints; ColQwen3 in TomoroAI's remote-code layout), pages and queries
over HTTP, against the references of tests/tiny_models (colpali-engine's recipe on transformers' and
PEFT's code, SIE's prompts; the remote code's recipe on transformers' classes) on the same bytes and
weights."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from sie.frontend.muvera import MuveraParams, fde
from tests import media_samples as samples
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, encode, post
from tests.tiny_models import colqwen2, colqwen3, colsmol

pytestmark = pytest.mark.slow

COLQWEN, COLQWEN3, COLSMOL = "tiny/colqwen2", "tiny/colqwen3", "tiny/colsmol"
MODELS = {
    COLQWEN: (colqwen2.make_colqwen2, colqwen2.model_yaml_colqwen2),
    COLQWEN3: (colqwen3.make_colqwen3, colqwen3.model_yaml_colqwen3),
    COLSMOL: (colsmol.make_colsmol, colsmol.model_yaml_colsmol),
}
REFERENCES = {COLQWEN: colqwen2, COLQWEN3: colqwen3, COLSMOL: colsmol}
COMPACT_TOKENS = 80  # the tiny ColQwen3's `compact` profile cap (SIE's: 768)
# Pages of three shapes (so of three device batches), one item with two of them.
IMAGES = [
    samples.jpeg(640, 480),
    samples.png_rgba(50, 90),
    samples.webp(64, 64),
    samples.jpeg(640, 480, seed=5),
]
QUERY = "What is the revenue in 2023?"
ATOL = 1e-4

Served = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, watched_server: WatchedServer) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("colvision")
    folders = {}
    for sie_id, (make, describe) in MODELS.items():
        folders[sie_id] = make(root / "weights" / sie_id.replace("/", "__"))
        watched_server.add(describe(sie_id, folders[sie_id]))
        body = {"items": [{"text": QUERY}], "params": {"output_types": ["multivector"]}}
        watched_server.wait_serving(f"/v1/encode/{sie_id}", body)
    yield watched_server.server, folders


def page(*images: bytes, as_json: bool, **extra: Any) -> dict[str, Any]:
    wire = [{"data": base64.b64encode(data).decode() if as_json else data} for data in images]
    return {"images": wire, **extra}


def multivectors(response: httpx.Response) -> list[np.ndarray]:
    assert response.status_code == 200, response.text
    out = []
    for item in decode(response)["items"]:
        entry = item["multivector"]
        out.append(np.asarray(entry["values"], np.float32).reshape(entry["num_tokens"], entry["token_dims"]))
    return out


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_pages_and_a_query_match_the_reference(served: Served, model: str, as_json: bool) -> None:
    server, folders = served
    items = [
        page(IMAGES[0], as_json=as_json),
        {"text": QUERY},
        page(IMAGES[1], IMAGES[2], as_json=as_json),
        page(IMAGES[3], as_json=as_json),
    ]
    body = {"items": items, "params": {"output_types": ["multivector"]}}
    got = multivectors(encode(server.url, model, body, as_json=as_json))
    reference = REFERENCES[model]
    pages = reference.reference_images(folders[model], IMAGES)
    query = reference.reference_queries(folders[model], [QUERY])[0]
    want = [pages[0], query, np.concatenate(pages[1:3]), pages[3]]
    for mine, theirs in zip(got, want, strict=True):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, atol=ATOL)


@pytest.mark.parametrize("model", list(MODELS))
def test_score_is_maxsim_against_the_reference_vectors(served: Served, model: str) -> None:
    import torch
    import transformers

    server, folders = served
    items = [page(data, as_json=True, id=f"p{i}") for i, data in enumerate(IMAGES)]
    body = {"query": {"text": QUERY}, "items": items}
    response = post(server.url, f"/v1/score/{model}", body, as_json=True)
    assert response.status_code == 200, response.text
    scores = {entry["item_id"]: entry["score"] for entry in response.json()["scores"]}
    reference = REFERENCES[model]
    want = transformers.ColQwen2Processor.score_retrieval(  # colpali-engine's MaxSim, as transformers has it
        None,
        [torch.from_numpy(reference.reference_queries(folders[model], [QUERY])[0])],
        [torch.from_numpy(m) for m in reference.reference_images(folders[model], IMAGES)],
    )[0].numpy()
    np.testing.assert_allclose([scores[f"p{i}"] for i in range(len(IMAGES))], want, atol=1e-3)


@pytest.mark.parametrize("model", list(MODELS))
def test_muvera_dense_is_the_fde_of_the_vectors(served: Served, model: str) -> None:
    server, _ = served
    params = {"num_repetitions": 4, "final_projection_dim": 256}
    for is_query, item in ((True, {"text": QUERY}), (False, page(IMAGES[0], as_json=False))):
        options = {"is_query": is_query, "muvera": params}
        body = {"items": [item], "params": {"output_types": ["dense", "multivector"], "options": options}}
        response = encode(server.url, model, body, as_json=False)
        vectors = multivectors(response)
        dense = np.asarray(decode(response)["items"][0]["dense"]["values"], np.float32)
        want = fde(
            vectors, is_query=is_query, params=MuveraParams(num_repetitions=4, final_projection_dim=256)
        )
        np.testing.assert_allclose(dense, want[0], atol=1e-5)


@pytest.mark.parametrize("model", list(MODELS))
def test_an_oversized_page_is_a_400(served: Served, model: str) -> None:
    server, _ = served
    body = {"items": [{"text": "fine"}, page(samples.jpeg(1001, 1000), as_json=False)]}
    for path, request in (
        (f"/v1/encode/{model}", {**body, "params": {"output_types": ["multivector"]}}),
        (f"/v1/score/{model}", {"query": {"text": QUERY}, **body}),
    ):
        response = post(server.url, path, request, as_json=False)
        assert response.status_code == 400, response.text
        detail = decode(response)["detail"]
        assert detail["code"] == "INVALID_INPUT"
        assert "Item 1 image 0: image of 1001x1000 pixels is over the limit" in detail["message"]


@pytest.mark.parametrize("model", [COLQWEN, COLQWEN3])
def test_a_page_too_long_for_qwen_is_a_400(served: Served, model: str) -> None:
    server, _ = served
    body = {
        "items": [page(samples.png_rgba(2010, 10), as_json=False)],
        "params": {"output_types": ["multivector"]},
    }
    response = encode(server.url, model, body, as_json=False)
    assert response.status_code == 400, response.text
    assert "Item 0 image 0: an image of 2010x10 pixels" in decode(response)["detail"]["message"]


def test_colqwen3_profile_ids_cap_pages_and_give_muvera(served: Served) -> None:
    """SIE's `compact` and `muvera` profiles, by options.profile or as ids of their own (one loaded
    model): compact pages are resized under its cap as the processor does; muvera answers dense."""
    server, folders = served
    body = {"items": [page(IMAGES[0], as_json=False)], "params": {"output_types": ["multivector"]}}
    want = colqwen3.reference_images(folders[COLQWEN3], IMAGES[:1], COMPACT_TOKENS)[0]
    full = multivectors(encode(server.url, COLQWEN3, body, as_json=False))[0]
    for name, options in ((f"{COLQWEN3}:compact", {}), (COLQWEN3, {"profile": "compact"})):
        request = {**body, "params": {**body["params"], "options": options}}
        got = multivectors(encode(server.url, name, request, as_json=False))[0]
        assert got.shape == want.shape and len(got) < len(full), name
        np.testing.assert_allclose(got, want, atol=ATOL, err_msg=name)
    muvera = encode(server.url, f"{COLQWEN3}:muvera", {"items": [{"text": QUERY}]}, as_json=False)
    assert muvera.status_code == 200, muvera.text
    item = decode(muvera)["items"][0]
    assert "multivector" not in item and len(item["dense"]["values"]) == 10240  # MUVERA's default size
    listed = {m["name"]: m for m in httpx.get(f"{server.url}/v1/models", timeout=10).json()["models"]}
    assert {f"{COLQWEN3}:compact", f"{COLQWEN3}:muvera"} <= set(listed)
    assert listed[COLQWEN3]["loaded"] and listed[f"{COLQWEN3}:compact"]["loaded"]  # the same instance


def test_sdk_encodes_every_model_as_the_reference(served: Served, tmp_path: Path) -> None:
    """sie-sdk's encode of a page and a query on each model, one run of the real client."""
    from tests.integration.test_sdk import SDK_PYTHON, array, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folders = served
    file = tmp_path / "page.jpg"
    file.write_bytes(IMAGES[0])  # encoded bytes: the SDK sends them unchanged
    items = [{"images": [{"bytes": str(file)}]}, {"text": QUERY}]
    kwargs = {"output_types": ["multivector"]}
    actions = [{"op": "encode", "model": model, "items": items, "kwargs": kwargs} for model in MODELS]
    for model, entry in zip(MODELS, run_sdk(server.url, actions), strict=True):
        reference = REFERENCES[model]
        want = [
            reference.reference_images(folders[model], IMAGES[:1])[0],
            reference.reference_queries(folders[model], [QUERY])[0],
        ]
        for result, theirs in zip(ok(entry), want, strict=True):
            mine = array(result["multivector"])
            assert mine.shape == theirs.shape, model
            np.testing.assert_allclose(mine, theirs, atol=ATOL, err_msg=model)
