"""BEIR SciFact nDCG@10 through the real server reproduces the published MTEB score of MiniLM."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from sie.settings import available_cores
from tests.integration.reference import MINILM
from tests.integration.server import REPO, Server, shm_names

SCRIPT = REPO / "scripts" / "eval_scifact.py"


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


@pytest.mark.timeout(1200)
def test_scifact_ndcg_matches_mteb() -> None:
    # Every core for the forward pass: 5,183 documents of up to 256 tokens are the whole cost here.
    server = Server("--torch-threads", str(available_cores()), frontends=1).wait_ready()
    try:
        result = eval_scifact.run_eval(server.url, MINILM, data=DATA, batch=32, parallel=4)
    finally:
        assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []
    assert result["documents"] == 5183 and result["queries"] == 300
    assert abs(result["ndcg_at_10"] - eval_scifact.MTEB_NDCG_AT_10) <= 0.005, result
