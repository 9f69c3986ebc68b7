"""BEIR SciFact (test split) nDCG@10 through a sie server, over HTTP.

    python scripts/eval_scifact.py [--url URL | --frontends N] [--model ID] [--output dense|sparse]
                                   [--batch 32] [--parallel 4] [--data DIR] [--server-arg=--flag=value]

Documents are embedded as `title + " " + text`, queries as their text (is_query, no instruction),
and each of the 300 test queries that have qrels is ranked against the whole corpus by dot product:
of the dense vectors (they come back L2-normalised, so this is cosine similarity), or with
`--output sparse` of the sparse term weights (`params.output_types=["sparse"]`; SPLADE-tiny by
default). nDCG@10 uses the standard formula: gain = the qrel relevance, discount 1/log2(rank + 1),
ideal DCG from the query's qrels (as pytrec_eval, which BEIR and MTEB use). The published MTEB
score of all-MiniLM-L6-v2 is 0.6451; other models are reported without a reference.

Without `--url` the script starts `python -m sie serve` itself and stops it at the end.
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
from _server import start_server, stop_server  # scripts/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parents[1]
# BEIR's SciFact, unzipped here (the README says how; data/ is not in git): corpus.jsonl,
# queries.jsonl and qrels/test.tsv. `--data DIR` reads it from anywhere else.
DEFAULT_DATA = REPO / "data" / "beir-scifact"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
DEFAULT_MODELS = {"dense": DEFAULT_MODEL, "sparse": "sie/splade-tiny"}
MSGPACK = "application/msgpack"
MTEB_NDCG_AT_10 = 0.6451
# Published nDCG@10 by (model, output), for the `diff` in the result.
REFERENCE_NDCG_AT_10 = {(DEFAULT_MODEL, "dense"): MTEB_NDCG_AT_10}


# ---------------------------------------------------------------------------------------------
# data


def load_scifact(data: Path) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """(documents id -> text, test queries id -> text, qrels query -> {doc: relevance})."""
    qrels: dict[str, dict[str, int]] = {}
    with (data / "qrels" / "test.tsv").open() as fh:
        next(fh)  # header: query-id corpus-id score
        for line in fh:
            query_id, doc_id, score = line.rstrip("\n").split("\t")
            qrels.setdefault(query_id, {})[doc_id] = int(score)
    documents = {}
    with (data / "corpus.jsonl").open() as fh:
        for line in fh:
            doc = json.loads(line)
            documents[doc["_id"]] = (doc["title"] + " " + doc["text"]).strip()
    queries = {}
    with (data / "queries.jsonl").open() as fh:
        for line in fh:
            query = json.loads(line)
            if query["_id"] in qrels:
                queries[query["_id"]] = query["text"]
    return documents, queries, qrels


# ---------------------------------------------------------------------------------------------
# metric


def ndcg_at_k(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    dcg = sum(relevant.get(doc, 0) / np.log2(rank + 2) for rank, doc in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(gain / np.log2(rank + 2) for rank, gain in enumerate(ideal))
    return float(dcg / idcg) if idcg > 0 else 0.0


def evaluate(
    doc_ids: list[str],
    query_ids: list[str],
    scores: np.ndarray,
    qrels: dict[str, dict[str, int]],
    k: int = 10,
) -> float:
    """Mean nDCG@k of ranking each query's row of `scores` [queries, documents]."""
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    per_query = [ndcg_at_k([doc_ids[j] for j in top[i]], qrels[qid], k) for i, qid in enumerate(query_ids)]
    return float(np.mean(per_query))


Sparse = tuple[np.ndarray, np.ndarray]  # (int32 vocabulary indices, float32 weights) of one text


def sparse_scores(queries: list[Sparse], documents: list[Sparse]) -> np.ndarray:
    """[queries, documents] dot products of sparse vectors.

    Only the terms some query has can score, so both sides become dense over those terms alone
    (a few thousand columns rather than the vocabulary) and one matrix product does the rest.
    """
    terms = np.unique(np.concatenate([indices for indices, _ in queries]))
    q = np.zeros((len(queries), len(terms)), np.float32)
    for row, (indices, values) in enumerate(queries):
        q[row, np.searchsorted(terms, indices)] = values
    d = np.zeros((len(documents), len(terms)), np.float32)
    for row, (indices, values) in enumerate(documents):
        hit = np.isin(indices, terms)
        d[row, np.searchsorted(terms, indices[hit])] = values[hit]
    scores: np.ndarray = q @ d.T
    return scores


# ---------------------------------------------------------------------------------------------
# embedding over HTTP


def _array(obj: Any) -> np.ndarray:
    if isinstance(obj, dict) and obj.get(b"nd") is True:
        return np.frombuffer(obj[b"data"], np.dtype(obj[b"type"])).reshape(obj[b"shape"])
    return np.asarray(obj, np.float32)


def _parse_item(item: dict[str, Any], output: str) -> Any:
    """A dense vector, or a sparse (indices, values) pair."""
    if output == "sparse":
        sparse = item["sparse"]
        return _array(sparse["indices"]).astype(np.int32), _array(sparse["values"]).astype(np.float32)
    return _array(item["dense"]["values"]).astype(np.float32)


async def _encode_batch(
    client: httpx.AsyncClient, model: str, texts: list[str], is_query: bool, output: str
) -> list[Any]:
    params = {"output_types": [output], "options": {"is_query": is_query}}
    body = {"items": [{"text": t} for t in texts], "params": params}
    for _attempt in range(120):
        response = await client.post(f"/v1/encode/{model}", content=msgpack.packb(body, use_bin_type=True))
        if response.status_code == 503 and "retry-after" in response.headers:
            await asyncio.sleep(float(response.headers["retry-after"]))
            continue
        response.raise_for_status()
        payload = msgpack.unpackb(response.content, raw=False)
        return [_parse_item(item, output) for item in payload["items"]]
    raise RuntimeError("server kept answering 503")


async def embed(
    url: str,
    model: str,
    texts: list[str],
    *,
    is_query: bool,
    batch: int,
    parallel: int,
    output: str = "dense",
) -> list[Any]:
    """Embed `texts`, results in order; batches are sorted by length, `parallel` of them in flight."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    chunks = [order[i : i + batch] for i in range(0, len(order), batch)]
    gate = asyncio.Semaphore(parallel)
    headers = {"content-type": MSGPACK, "accept": MSGPACK}
    limits = httpx.Limits(max_connections=parallel, max_keepalive_connections=parallel)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=600) as client:

        async def one(chunk: list[int]) -> list[Any]:
            async with gate:
                return await _encode_batch(client, model, [texts[i] for i in chunk], is_query, output)

        results = await asyncio.gather(*(one(chunk) for chunk in chunks))
    out: list[Any] = [None] * len(texts)
    for chunk, embeddings in zip(chunks, results, strict=True):
        for i, embedding in zip(chunk, embeddings, strict=True):
            out[i] = embedding
    return out


# ---------------------------------------------------------------------------------------------
# server lifecycle


# ---------------------------------------------------------------------------------------------
# main


def run_eval(
    url: str,
    model: str,
    data: Path = DEFAULT_DATA,
    batch: int = 32,
    parallel: int = 4,
    output: str = "dense",
) -> dict[str, Any]:
    documents, queries, qrels = load_scifact(data)
    doc_ids, query_ids = list(documents), list(queries)

    def embed_all(texts: list[str], is_query: bool) -> list[Any]:
        return asyncio.run(
            embed(url, model, texts, is_query=is_query, batch=batch, parallel=parallel, output=output)
        )

    start = time.perf_counter()
    doc_embeddings = embed_all(list(documents.values()), is_query=False)
    docs_s = time.perf_counter() - start
    query_embeddings = embed_all(list(queries.values()), is_query=True)
    queries_s = time.perf_counter() - start - docs_s
    if output == "sparse":
        scores = sparse_scores(query_embeddings, doc_embeddings)
    else:
        scores = np.stack(query_embeddings) @ np.stack(doc_embeddings).T
    ndcg = evaluate(doc_ids, query_ids, scores, qrels)
    reference = REFERENCE_NDCG_AT_10.get((model, output))
    return {
        "ndcg_at_10": round(ndcg, 5),
        "mteb_ndcg_at_10": reference,
        "diff": None if reference is None else round(ndcg - reference, 5),
        "output": output,
        "documents": len(doc_ids),
        "queries": len(query_ids),
        "docs_s": round(docs_s, 2),
        "docs_per_s": round(len(doc_ids) / docs_s, 1),
        "queries_s": round(queries_s, 2),
        "model": model,
        "batch": batch,
        "parallel": parallel,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="an already running server (default: start one)")
    parser.add_argument("--frontends", type=int, default=2)
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra `sie serve` argument (repeat)"
    )
    parser.add_argument("--model", help="default: all-MiniLM-L6-v2 (dense), sie/splade-tiny (sparse)")
    parser.add_argument("--output", choices=("dense", "sparse"), default="dense")
    parser.add_argument("--batch", type=int, default=32, help="items per request")
    parser.add_argument("--parallel", type=int, default=4, help="requests in flight")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args(argv)
    model = args.model or DEFAULT_MODELS[args.output]
    process, url = (None, args.url) if args.url else start_server(args.frontends, args.server_arg, "eval")[:2]
    start = time.perf_counter()
    try:
        result = run_eval(url, model, args.data, args.batch, args.parallel, args.output)
    finally:
        code = stop_server(process) if process else None
    result["total_s"] = round(time.perf_counter() - start, 2)
    result["server_exit_code"] = code
    reference = f" (MTEB {result['mteb_ndcg_at_10']})" if result["mteb_ndcg_at_10"] is not None else ""
    print(f"SciFact test nDCG@10 = {result['ndcg_at_10']:.5f}{reference} in {result['total_s']} s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
