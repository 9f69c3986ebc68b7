"""LLM rerankers end to end: /v1/score, /v1/rerank and Cohere's /v2/rerank on a real server, against
transformers' full causal LM on SIE's prompt recipe and sentence-transformers' CrossEncoder.

Two tiny random models: a Qwen3 reranker (SIE's Qwen3-Reranker settings, its own default
instruction) and a zerank-style saved CrossEncoder stack (the native recipe).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import torch
import transformers

from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, post
from tests.tiny_models.llm_reranker import (
    MAX_SEQUENCE_LENGTH,
    make_llm_reranker,
    model_yaml_llm_reranker,
    sie_rows,
)

pytestmark = pytest.mark.slow

QWEN3 = "tiny/qwen3-reranker"
NATIVE = "tiny/zerank"
PROFILE_INSTRUCTION = "Given a question about pets, find the passage that answers it"
QUERY = "how long do cats sleep"
DOCS = [
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed higher on Friday.",
    "Kittens and older cats sleep even longer than adults.",
    "cats",
    "dogs sleep long hours " * 40,  # cut to the row limit
    "Python is a programming language that lets you work quickly.",
]

Lab = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, watched_server: WatchedServer) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("llm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folders = {
            QWEN3: make_llm_reranker(root / "qwen3", seed=5, arch="qwen3"),
            NATIVE: make_llm_reranker(root / "native", seed=6, native=True),
        }
    qwen3 = model_yaml_llm_reranker(QWEN3, folders[QWEN3])
    qwen3["profiles"]["default"]["adapter_options"]["runtime"]["default_instruction"] = PROFILE_INSTRUCTION
    native = model_yaml_llm_reranker(NATIVE, folders[NATIVE], input_format="native")
    for sie_id, raw in ((QWEN3, qwen3), (NATIVE, native)):
        watched_server.add(raw)
        body = {"query": {"text": QUERY}, "items": [{"text": "cats"}]}
        watched_server.wait_serving(f"/v1/score/{sie_id}", body)
    yield watched_server.server, folders


def reference(folder: Path, instruction: str | None = None) -> np.ndarray:
    """P(yes) over [no, yes] from the full model's logits after each of SIE's rows, run alone."""
    rows = sie_rows(
        folder,
        "qwen3",
        QUERY,
        DOCS,
        max_length=MAX_SEQUENCE_LENGTH,
        instruction=instruction,
        default_instruction=PROFILE_INSTRUCTION,
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    yes, no = (tokenizer.encode(t, add_special_tokens=False)[0] for t in ("yes", "no"))
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = torch.stack([model(input_ids=torch.tensor([row])).logits[0, -1] for row in rows])
    result: np.ndarray = torch.log_softmax(logits[:, [no, yes]].float(), dim=-1)[:, 1].exp().numpy()
    return result


def score(url: str, model: str, body: dict[str, Any], *, as_json: bool = True) -> dict[str, Any]:
    response = post(url, f"/v1/score/{model}", body, as_json=as_json)
    assert response.status_code == 200, response.text
    return decode(response)


def by_item(payload: dict[str, Any]) -> np.ndarray:
    found = {entry["item_id"]: entry["score"] for entry in payload["scores"]}
    return np.array([found[f"item-{i}"] for i in range(len(DOCS))])


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_score_matches_the_causal_lm_on_sies_prompt(lab: Lab, as_json: bool) -> None:
    server, folders = lab
    body = {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]}
    payload = score(server.url, QWEN3, body, as_json=as_json)
    want = reference(folders[QWEN3])  # the profile's default instruction
    np.testing.assert_allclose(by_item(payload), want, rtol=0, atol=1e-4)
    assert [e["rank"] for e in payload["scores"]] == list(range(len(DOCS)))
    assert payload["usage"]["input_tokens"] > MAX_SEQUENCE_LENGTH
    asked = score(server.url, QWEN3, {**body, "instruction": "Judge sleep"}, as_json=as_json)
    np.testing.assert_allclose(by_item(asked), reference(folders[QWEN3], "Judge sleep"), rtol=0, atol=1e-4)
    assert not np.allclose(by_item(asked), want, atol=1e-4)


def test_rerank_v1_and_v2_rank_as_score_does(lab: Lab) -> None:
    server, _ = lab
    payload = score(server.url, QWEN3, {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]})
    expected = [(int(e["item_id"].split("-")[1]), e["score"]) for e in payload["scores"]]
    body = {"model": QWEN3, "query": QUERY, "documents": DOCS, "top_n": 3, "return_documents": True}
    v1 = httpx.post(f"{server.url}/v1/rerank", json=body, timeout=60)
    assert v1.status_code == 200, v1.text
    results = v1.json()["results"]
    assert [(r["index"], r["document"]["text"]) for r in results] == [(i, DOCS[i]) for i, _ in expected[:3]]
    np.testing.assert_allclose(
        [r["relevance_score"] for r in results], [s for _, s in expected[:3]], atol=1e-6
    )
    documents = [d if i % 2 else {"text": d} for i, d in enumerate(DOCS)]  # both of Cohere's spellings
    v2 = httpx.post(f"{server.url}/v2/rerank", json={"model": QWEN3, "query": QUERY, "documents": documents})
    assert v2.status_code == 200, v2.text
    answer = v2.json()
    assert answer["id"] and answer["meta"]["tokens"]["input_tokens"] == payload["usage"]["input_tokens"]
    assert [r["index"] for r in answer["results"]] == [i for i, _ in expected]
    assert all("document" not in r for r in answer["results"])


def test_cohere_client_v2(lab: Lab) -> None:
    cohere = pytest.importorskip("cohere")
    server, _ = lab
    payload = score(server.url, QWEN3, {"query": {"text": QUERY}, "items": [{"text": d} for d in DOCS]})
    client = cohere.ClientV2(api_key="unused", base_url=server.url, timeout=60)
    answer = client.rerank(model=QWEN3, query=QUERY, documents=DOCS, top_n=4)
    want = [(int(e["item_id"].split("-")[1]), e["score"]) for e in payload["scores"]][:4]
    assert [(r.index, pytest.approx(r.relevance_score, abs=1e-6)) for r in answer.results] == want
    with pytest.raises(cohere.BadRequestError):
        client.rerank(model=QWEN3, query=QUERY, documents=[])


def test_native_scores_as_sentence_transformers(lab: Lab) -> None:
    from sentence_transformers import CrossEncoder

    server, folders = lab
    docs = DOCS[:-2]
    payload = score(server.url, NATIVE, {"query": {"text": QUERY}, "items": [{"text": d} for d in docs]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = CrossEncoder(str(folders[NATIVE]), device="cpu").predict([(QUERY, d) for d in docs])
    found = {entry["item_id"]: entry["score"] for entry in payload["scores"]}
    np.testing.assert_allclose([found[f"item-{i}"] for i in range(len(docs))], want, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        ("/v1/rerank", {"model": QWEN3, "query": QUERY, "documents": []}, 400, "items must not be empty"),
        ("/v1/rerank", {"model": QWEN3, "documents": ["a"]}, 400, "query"),
        ("/v2/rerank", {"model": QWEN3, "query": QUERY, "documents": []}, 400, "items must not be empty"),
        ("/v2/rerank", {"model": QWEN3, "documents": ["a"]}, 400, "query"),
        ("/v2/rerank", {"model": QWEN3, "query": " ", "documents": ["a"]}, 400, "'query' must be"),
        (
            "/v2/rerank",
            {"model": QWEN3, "query": "q", "documents": ["a"], "max_tokens_per_doc": 9},
            400,
            "max_t",
        ),
        ("/v2/rerank", {"model": QWEN3, "query": "q", "documents": [{"txt": "a"}]}, 400, "text"),
        (f"/v1/score/{QWEN3}", {"items": [{"text": "x"}]}, 400, "query"),
        (f"/v1/score/{QWEN3}", {"query": {"text": "q"}, "items": []}, 400, "items must not be empty"),
        (f"/v1/score/{QWEN3}", {"query": {"text": "q"}, "items": [{"text": " "}]}, 400, "non-empty"),
        (
            f"/v1/score/{QWEN3}",
            {"query": {"text": "q"}, "items": [{"text": "x"}], "options": {"max_seq_length": 8}},
            400,
            "max_seq_length=8 is too small",
        ),
        (
            f"/v1/score/{NATIVE}",
            {"query": {"text": "q"}, "items": [{"text": "x"}], "instruction": "Judge"},
            400,
            "not in an instruction",
        ),
        (
            f"/v1/score/{NATIVE}",
            {"query": {"text": "q"}, "items": [{"text": "cats " * 400}]},
            413,
            "exceeds the 256-token context",
        ),
    ],
)
def test_bad_requests_get_the_error_shape(
    lab: Lab, path: str, body: dict[str, Any], status: int, fragment: str
) -> None:
    server, _ = lab
    response = httpx.post(f"{server.url}{path}", json=body, timeout=30)
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail["code"] == ("INVALID_INPUT" if status == 400 else "INPUT_TOO_LONG")
    assert fragment in detail["message"]


def test_sdk_score_matches_the_causal_lm(lab: Lab) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folders = lab
    items = [{"text": d} for d in DOCS]
    action = {"op": "score", "model": QWEN3, "query": {"text": QUERY}, "items": items}
    [entry] = run_sdk(server.url, [{**action, "kwargs": {"instruction": "Judge sleep"}}])
    result = ok(entry)
    np.testing.assert_allclose(by_item(result), reference(folders[QWEN3], "Judge sleep"), rtol=0, atol=1e-4)
    assert [e["rank"] for e in result["scores"]] == list(range(len(DOCS)))
