"""BEIR SciFact retrieval through the real server (scripts/eval_scifact.py's HTTP path) ranks as
sentence-transformers ranks with the same MiniLM in process.

Every fourth test query (75) against a fixed slice of the corpus: each document one of them needs
and every 100th other one (about 130 abstracts of up to 256 tokens, so truncation is exercised). The
whole corpus
reproduces MTEB's published nDCG@10 (docs/performance.md, "Retrieval quality"), but takes minutes
on a 2-core box: that is a benchmark, run by the script itself.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from types import ModuleType

import numpy as np
import pytest

from tests.integration.reference import MINILM, minilm_dir
from tests.integration.server import REPO, Server

SCRIPT = REPO / "scripts" / "eval_scifact.py"
EVERY_QUERY = 4  # keep one test query in this many
EVERY_OTHER = 100  # of the documents no kept query needs, keep one in this many


def load_script() -> ModuleType:
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))  # as when run as `python scripts/eval_scifact.py`
    spec = importlib.util.spec_from_file_location("eval_scifact", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


eval_scifact = load_script()
# The repository's own data/ (README: "Retrieval quality"), else the development box's shared copy.
DATA = next(
    (
        d
        for d in (eval_scifact.DEFAULT_DATA, REPO.parent / "shared" / "data" / "beir-scifact")
        if (d / "corpus.jsonl").exists()
    ),
    eval_scifact.DEFAULT_DATA,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (DATA / "corpus.jsonl").exists(), reason="no SciFact data"),
]


@pytest.mark.timeout(600)  # about 30 s alone, twice that beside another worker's tests
def test_scifact_ranking_over_http_matches_sentence_transformers(minilm_server: Server) -> None:
    from sentence_transformers import SentenceTransformer

    documents, queries, qrels = eval_scifact.load_scifact(DATA)
    query_ids = list(queries)[::EVERY_QUERY]
    relevant = {doc for query in query_ids for doc in qrels[query]}
    others = set([doc for doc in documents if doc not in relevant][::EVERY_OTHER])
    doc_ids = [doc for doc in documents if doc in relevant or doc in others]
    doc_texts, query_texts = [documents[d] for d in doc_ids], [queries[q] for q in query_ids]
    assert len(query_ids) == 75 and len(relevant) <= len(doc_ids) < 150

    def served(texts: list[str], is_query: bool) -> np.ndarray:
        run = eval_scifact.embed(minilm_server.url, MINILM, texts, is_query=is_query, batch=32, parallel=4)
        return np.stack(asyncio.run(run))

    mine = served(query_texts, True) @ served(doc_texts, False).T
    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    encode = model.encode
    theirs = encode(query_texts, normalize_embeddings=True) @ encode(doc_texts, normalize_embeddings=True).T
    np.testing.assert_allclose(mine, theirs, atol=1e-4)
    ndcg = eval_scifact.evaluate(doc_ids, query_ids, mine, qrels)
    assert ndcg == pytest.approx(eval_scifact.evaluate(doc_ids, query_ids, theirs, qrels), abs=2e-3)
    assert ndcg > 0.7  # the relevant documents are all there, among few others
