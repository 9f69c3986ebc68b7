"""Score, rerank and extract end to end: the real server against the reference libraries.

Every model is a tiny random-weight one (see tests.integration.families); the references run the
same weights in this process: sentence-transformers' CrossEncoder and transformers' pipelines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.integration.families import NER, NLI, RERANKER
from tests.integration.server import Server
from tests.integration.texts import random_texts
from tests.integration.wire import decode, post

pytestmark = pytest.mark.slow

Families = tuple[Server, dict[str, Path]]
QUERY = "what causes high blood pressure"


def score(url: str, model: str, query: str, items: list[dict[str, Any]], *, as_json: bool) -> dict[str, Any]:
    response = post(url, f"/v1/score/{model}", {"query": {"text": query}, "items": items}, as_json=as_json)
    assert response.status_code == 200, response.text
    return decode(response)


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_score_matches_sentence_transformers_cross_encoder(families: Families, as_json: bool) -> None:
    from sentence_transformers import CrossEncoder

    server, folders = families
    passages = random_texts(25, 3, 60, seed=11)
    items = [{"id": f"p{i}", "text": t} for i, t in enumerate(passages)]
    items[3].pop("id")
    payload = score(server.url, RERANKER, QUERY, items, as_json=as_json)
    expected = CrossEncoder(str(folders[RERANKER]), device="cpu").predict([(QUERY, p) for p in passages])
    got = {entry["item_id"]: entry for entry in payload["scores"]}
    ids = [item.get("id", f"item-{i}") for i, item in enumerate(items)]
    assert sorted(got) == sorted(ids) and "item-3" in got
    np.testing.assert_allclose([got[i]["score"] for i in ids], expected, atol=1e-4)
    assert [e["rank"] for e in payload["scores"]] == list(range(len(items)))
    assert [e["score"] for e in payload["scores"]] == sorted(
        (e["score"] for e in payload["scores"]), reverse=True
    )
    assert payload["model"] == RERANKER and payload["usage"]["input_tokens"] > 0


def test_one_item_scores_the_same_alone_and_in_a_batch(families: Families) -> None:
    server, _ = families
    passages = random_texts(12, 3, 80, seed=12)
    batch = score(
        server.url, RERANKER, QUERY, [{"id": str(i), "text": p} for i, p in enumerate(passages)], as_json=True
    )
    by_id = {e["item_id"]: e["score"] for e in batch["scores"]}
    for index in (0, 7):
        alone = score(
            server.url, RERANKER, QUERY, [{"id": str(index), "text": passages[index]}], as_json=True
        )
        assert alone["scores"][0]["score"] == pytest.approx(by_id[str(index)], abs=1e-5)


def test_rerank_is_the_score_route_in_cohere_shape(families: Families) -> None:
    server, _ = families
    documents = random_texts(8, 3, 40, seed=13)
    scored = score(server.url, RERANKER, QUERY, [{"text": d} for d in documents], as_json=True)
    expected = [(int(e["item_id"].split("-")[1]), e["score"]) for e in scored["scores"]]
    body = {"model": RERANKER, "query": QUERY, "documents": documents, "top_n": 3, "return_documents": True}
    response = httpx.post(f"{server.url}/v1/rerank", json=body, timeout=60)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["index"] for r in results] == [index for index, _ in expected[:3]]
    np.testing.assert_allclose(
        [r["relevance_score"] for r in results], [s for _, s in expected[:3]], atol=1e-6
    )
    assert results[0]["document"] == {"text": documents[expected[0][0]]}
    assert response.json()["usage"]["input_tokens"] == scored["usage"]["input_tokens"]


def test_token_classification_matches_the_transformers_pipeline(families: Families) -> None:
    from transformers import pipeline

    server, folders = families
    texts = ["Alice Smith flew from Paris to Berlin on Monday.", *random_texts(5, 5, 40, seed=14)]
    response = post(
        server.url, f"/v1/extract/{NER}", {"items": [{"id": "a", "text": t} for t in texts]}, as_json=False
    )
    assert response.status_code == 200, response.text
    items = decode(response)["items"]
    reference = pipeline(
        "token-classification", model=str(folders[NER]), aggregation_strategy="simple", device="cpu"
    )
    for item, text in zip(items, texts, strict=True):
        assert set(item) == {"id", "entities", "relations", "classifications", "objects", "data"}
        want = reference(text)
        assert [(e["label"], e["start"], e["end"]) for e in item["entities"]] == [
            (w["entity_group"], w["start"], w["end"]) for w in want
        ]
        np.testing.assert_allclose(
            [e["score"] for e in item["entities"]], [w["score"] for w in want], atol=1e-4
        )
        assert all(e["text"] == text[e["start"] : e["end"]] for e in item["entities"])
    assert any(item["entities"] for item in items)


@pytest.mark.parametrize("multi_label", [False, True])
def test_nli_zero_shot_matches_the_transformers_pipeline(families: Families, multi_label: bool) -> None:
    from transformers import pipeline

    server, folders = families
    texts = ["The team won the championship last night.", "Stocks fell sharply after the report."]
    labels = ["sports", "finance", "politics"]
    body = {
        "items": [{"text": t} for t in texts],
        "params": {"labels": labels, "options": {"multi_label": multi_label}},
    }
    response = post(server.url, f"/v1/extract/{NLI}", body, as_json=True)
    assert response.status_code == 200, response.text
    reference = pipeline("zero-shot-classification", model=str(folders[NLI]), device="cpu")
    for item, text in zip(response.json()["items"], texts, strict=True):
        want = reference(text, candidate_labels=labels, multi_label=multi_label)
        assert [c["label"] for c in item["classifications"]] == want["labels"]
        np.testing.assert_allclose([c["score"] for c in item["classifications"]], want["scores"], atol=1e-4)
        assert item["entities"] == [] and item["data"] == {}


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        (f"/v1/score/{RERANKER}", {"items": [{"text": "x"}]}, "query"),
        (f"/v1/score/{RERANKER}", {"query": {"text": "q"}, "items": []}, "items must not be empty"),
        (f"/v1/score/{RERANKER}", {"query": {"text": "q"}, "items": [{"text": "x"}] * 1001}, "at most 1000"),
        (f"/v1/score/{NER}", {"query": {"text": "q"}, "items": [{"text": "x"}]}, "does not support scoring"),
        (f"/v1/score/{RERANKER}", {"query": {"text": "q"}, "items": [{"text": 5}]}, "$.items[0].text"),
        (f"/v1/extract/{NLI}", {"items": [{"text": "x"}]}, "labels"),
        (
            f"/v1/extract/{NLI}",
            {"items": [{"text": "x"}], "params": {"labels": ["a"] * 1001}},
            "at most 1000",
        ),
        (f"/v1/extract/{RERANKER}", {"items": [{"text": "x"}]}, "does not support extraction"),
        (
            f"/v1/extract/{NLI}",
            {"items": [{"text": "x"}], "params": {"labels": ["a"], "options": {"multi_label": 3}}},
            "multi_label",
        ),
        ("/v1/rerank", {"model": RERANKER, "query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
        ("/v1/rerank", {"model": RERANKER, "query": "q", "documents": ["a", 3]}, "$.documents[1]"),
        ("/v1/rerank", {"model": RERANKER, "query": "q", "documents": []}, "items must not be empty"),
        (
            f"/v1/score/{RERANKER}",
            {"query": {"text": "q"}, "items": [{"text": "x"}], "options": {"lora": "nope"}},
            "Unknown LoRA adapter 'nope'",
        ),
        (
            f"/v1/extract/{NER}",
            {"items": [{"text": "x"}], "params": {"options": {"lora_id": 7}}},
            "options.lora",
        ),
    ],
)
def test_bad_score_and_extract_requests_are_400(
    families: Families, path: str, body: dict[str, Any], fragment: str
) -> None:
    server, _ = families
    response = httpx.post(f"{server.url}{path}", json=body, timeout=30)
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail["code"] == "INVALID_INPUT" and fragment in detail["message"]
