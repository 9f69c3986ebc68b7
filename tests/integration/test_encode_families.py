"""Sparse, multi-vector, hybrid, MUVERA and GLiNER end to end: the real server over HTTP against a
reference running the same tiny weights in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from sie.frontend.muvera import MuveraParams, fde
from sie.frontend.smve import SmveParams
from sie.frontend.smve import encode as smve_encode
from tests.gpu_proc import test_hybrid_adapter as hybrid_reference
from tests.gpu_proc import test_splade_adapter as splade_reference
from tests.integration.families import COLBERT, DENSE, GLINER, HYBRID, NER, RERANKER, SPLADE
from tests.integration.server import Server
from tests.integration.texts import random_texts
from tests.integration.wire import decode, encode, post

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]


def items_of(texts: list[str]) -> list[dict[str, Any]]:
    return [{"id": f"t{i}", "text": t} for i, t in enumerate(texts)]


def encoded(
    url: str, model: str, texts: list[str], *, as_json: bool = False, **params: Any
) -> list[dict[str, Any]]:
    response = encode(url, model, {"items": items_of(texts), "params": params}, as_json=as_json)
    assert response.status_code == 200, response.text
    return decode(response)["items"]


def sparse_dict(entry: dict[str, Any]) -> dict[int, float]:
    return dict(
        zip(
            np.asarray(entry["indices"]).tolist(),
            np.asarray(entry["values"], np.float64).tolist(),
            strict=True,
        )
    )


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_splade_sparse_matches_the_masked_lm_formula(families: Families, as_json: bool) -> None:
    server, folders = families
    texts = random_texts(6, 3, 40, seed=21)
    items = encoded(server.url, SPLADE, texts, as_json=as_json, output_types=["sparse"])
    want = splade_reference.reference(folders[SPLADE], splade_reference.tokenize(folders[SPLADE], texts))
    for item, row in zip(items, want, strict=True):
        assert set(item) == {"id", "sparse"}
        entry = item["sparse"]
        indices = np.asarray(entry["indices"])
        assert entry["dims"] == 30522 and entry["dtype"] == "float32"
        assert np.all(np.diff(indices) > 0)
        np.testing.assert_array_equal(indices, np.flatnonzero(row))
        np.testing.assert_allclose(np.asarray(entry["values"]), row[indices], atol=1e-4)


def test_sparse_float16_and_query_mode(families: Families) -> None:
    server, _ = families
    texts = ["what causes high blood pressure"]
    as_doc = encoded(server.url, SPLADE, texts, output_types=["sparse"])[0]["sparse"]
    half = encoded(server.url, SPLADE, texts, output_types=["sparse"], output_dtype="float16")[0]["sparse"]
    query = encoded(server.url, SPLADE, texts, output_types=["sparse"], options={"is_query": True})[0][
        "sparse"
    ]
    assert half["dtype"] == "float16" and np.asarray(half["values"]).dtype == np.float16
    np.testing.assert_allclose(np.asarray(half["values"], np.float32), as_doc["values"], rtol=1e-3)
    assert sparse_dict(query) == pytest.approx(sparse_dict(as_doc))  # SPLADE-tiny encodes both alike


def test_colbert_multivector_matches_sentence_transformers(
    families: Families, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from sentence_transformers import MultiVectorEncoder

    server, folders = families
    reference = MultiVectorEncoder(str(folders[COLBERT]), device="cpu")
    queries, documents = ["what causes high blood pressure"], random_texts(4, 5, 60, seed=22)
    for is_query, texts in ((True, queries), (False, documents)):
        items = encoded(
            server.url, COLBERT, texts, output_types=["multivector"], options={"is_query": is_query}
        )
        want = reference.encode_query(texts) if is_query else reference.encode_document(texts)
        for item, matrix in zip(items, want, strict=True):
            entry = item["multivector"]
            assert (entry["num_tokens"], entry["token_dims"]) == tuple(matrix.shape)
            np.testing.assert_allclose(np.asarray(entry["values"]), matrix.numpy(), atol=1e-5)


def test_muvera_dense_is_the_fde_of_the_multivector(families: Families) -> None:
    server, _ = families
    texts = random_texts(3, 5, 40, seed=23)
    params = {"num_repetitions": 8, "final_projection_dim": 512}
    for is_query in (True, False):
        options = {"is_query": is_query, "muvera": params}
        items = encoded(server.url, COLBERT, texts, output_types=["dense", "multivector"], options=options)
        vectors = [np.asarray(item["multivector"]["values"], np.float32) for item in items]
        want = fde(
            vectors, is_query=is_query, params=MuveraParams(num_repetitions=8, final_projection_dim=512)
        )
        got = np.stack([np.asarray(item["dense"]["values"]) for item in items])
        assert items[0]["dense"]["dims"] == 512
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_smve_sparse_is_the_smve_of_the_multivector(families: Families) -> None:
    server, _ = families
    texts = random_texts(3, 5, 40, seed=23)
    params = {"width": 4096, "k": 8}
    for is_query in (True, False):
        options = {"is_query": is_query, "smve": params}
        items = encoded(server.url, COLBERT, texts, output_types=["sparse", "multivector"], options=options)
        vectors = [np.asarray(item["multivector"]["values"], np.float32) for item in items]
        want = smve_encode(vectors, is_query=is_query, params=SmveParams(width=4096, k=8))
        for item, (indices, values) in zip(items, want, strict=True):
            assert item["sparse"]["dims"] == 4096
            np.testing.assert_array_equal(np.asarray(item["sparse"]["indices"]), indices)
            np.testing.assert_allclose(np.asarray(item["sparse"]["values"]), values, atol=1e-5)


def test_colbert_scores_by_maxsim(families: Families) -> None:
    server, _ = families
    query, docs = "blood pressure", random_texts(5, 5, 40, seed=24)
    response = post(
        server.url,
        f"/v1/score/{COLBERT}",
        {"query": {"text": query}, "items": [{"text": d} for d in docs]},
        as_json=True,
    )
    assert response.status_code == 200, response.text
    q = np.asarray(
        encoded(
            server.url,
            COLBERT,
            [query],
            as_json=True,
            output_types=["multivector"],
            options={"is_query": True},
        )[0]["multivector"]["values"]
    )
    d = [
        np.asarray(i["multivector"]["values"])
        for i in encoded(server.url, COLBERT, docs, as_json=True, output_types=["multivector"])
    ]
    want = [float((q @ m.T).max(axis=1).sum()) for m in d]
    got = {int(e["item_id"].split("-")[1]): e["score"] for e in response.json()["scores"]}
    np.testing.assert_allclose([got[i] for i in range(len(docs))], want, atol=1e-4)


def test_hybrid_returns_only_what_was_asked(families: Families) -> None:
    server, folders = families
    texts = random_texts(4, 3, 50, seed=25)
    want = hybrid_reference.reference(folders[HYBRID], hybrid_reference.tokenize(folders[HYBRID], texts))
    every = encoded(server.url, HYBRID, texts, output_types=["dense", "sparse", "multivector"])
    for i, item in enumerate(every):
        dense = want.dense[i] / np.linalg.norm(want.dense[i])
        np.testing.assert_allclose(np.asarray(item["dense"]["values"]), dense, atol=1e-5)
        assert sparse_dict(item["sparse"]) == pytest.approx(want.sparse[i], abs=1e-4)
        vectors = want.multivector[i] / np.linalg.norm(want.multivector[i], axis=1, keepdims=True)
        np.testing.assert_allclose(np.asarray(item["multivector"]["values"]), vectors, atol=1e-5)
    for kinds in (["sparse"], ["dense", "multivector"]):
        alone = encoded(server.url, HYBRID, texts, output_types=kinds)
        assert all(set(item) == {"id", *kinds} for item in alone)
        for kind in kinds:
            key = "indices" if kind == "sparse" else "values"
            np.testing.assert_allclose(
                np.asarray(alone[1][kind][key]), np.asarray(every[1][kind][key]), atol=1e-6
            )


def test_gliner_matches_predict_entities(families: Families) -> None:
    gliner = pytest.importorskip("gliner")
    server, folders = families
    reference = gliner.GLiNER.from_pretrained(str(folders[GLINER]), local_files_only=True)
    texts = [
        "John Smith lives in New York and works at Springfield Elementary School since 2004.",
        "Paris is nice.",
    ]
    labels = ["person", "location", "organization"]
    for threshold in (0.5, 0.7):
        body = {
            "items": [{"text": t} for t in texts],
            "params": {"labels": labels, "options": {"threshold": threshold}},
        }
        response = post(server.url, f"/v1/extract/{GLINER}", body, as_json=False)
        assert response.status_code == 200, response.text
        for item, text in zip(decode(response)["items"], texts, strict=True):
            want = reference.predict_entities(text, labels, threshold=threshold)
            assert [(e["label"], e["start"], e["end"], e["text"]) for e in item["entities"]] == [
                (w["label"], w["start"], w["end"], w["text"]) for w in want
            ]
            np.testing.assert_allclose(
                [e["score"] for e in item["entities"]], [w["score"] for w in want], atol=1e-4
            )


def test_models_list_every_family_truthfully(families: Families) -> None:
    server, _ = families
    models = {m["name"]: m for m in httpx.get(f"{server.url}/v1/models", timeout=10).json()["models"]}
    assert models[SPLADE]["outputs"] == ["sparse"] and models[SPLADE]["dims"] == {"sparse": 30522}
    assert models[COLBERT]["outputs"] == ["multivector", "score"]
    assert models[HYBRID]["outputs"] == ["dense", "sparse", "multivector", "score"]  # MaxSim
    assert models[RERANKER]["outputs"] == ["score"] and models[NER]["outputs"] == ["json"]
    assert models[DENSE]["outputs"] == ["dense"]
    assert all(m["state"] == "loaded" for m in models.values())


@pytest.mark.parametrize(
    ("model", "params", "fragment"),
    [
        (DENSE, {"output_types": ["sparse"]}, "does not support output types: {'sparse'}"),
        (DENSE, {"output_types": ["bogus"]}, "{'bogus'}"),
        (SPLADE, {"output_types": ["dense"]}, "Supported: {'sparse'}"),
        (
            COLBERT,
            {"output_types": ["dense"], "options": {"muvera": {"num_repetitions": "many"}}},
            "num_repetitions",
        ),
        (COLBERT, {"output_types": ["dense"], "options": {"muvera": 3}}, "$.params.options.muvera"),
        (COLBERT, {"output_types": ["dense"]}, "Supported: {'multivector'}"),
        (DENSE, {"output_types": []}, "output_types must not be empty"),
    ],
)
def test_bad_encode_outputs_are_400(
    families: Families, model: str, params: dict[str, Any], fragment: str
) -> None:
    server, _ = families
    response = encode(server.url, model, {"items": [{"text": "x"}], "params": params}, as_json=True)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["detail"]["message"]


def test_each_family_gives_an_item_the_same_result_alone_and_in_a_batch(families: Families) -> None:
    server, _ = families
    texts = random_texts(10, 3, 60, seed=26)
    for model, kind in ((SPLADE, "sparse"), (COLBERT, "multivector"), (HYBRID, "dense")):
        batch = encoded(server.url, model, texts, output_types=[kind])
        alone = encoded(server.url, model, [texts[6]], output_types=[kind])[0]
        np.testing.assert_allclose(
            np.asarray(alone[kind]["values"]), np.asarray(batch[6][kind]["values"]), atol=1e-5
        )
