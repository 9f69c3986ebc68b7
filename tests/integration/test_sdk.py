"""The real SIE Python SDK (`sie-sdk` 0.10.1, Python 3.12, its own venv) against our server.

The SDK cannot be imported here (it needs Python 3.12 and lives in `.venv-sdk`), so each test runs
`sdk_client.py` under that venv's Python with a JSON list of actions and compares its JSON output
with reference embeddings from plain transformers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sie.catalog import BUILTIN_MODELS_DIR
from tests.integration.reference import MINILM, minilm_dir, reference_embeddings
from tests.integration.server import REPO, Server, shm_names
from tests.integration.texts import assert_close

SDK_PYTHON = REPO / ".venv-sdk" / "bin" / "python"
CLIENT = Path(__file__).with_name("sdk_client.py")
COPY = "sie-test/minilm-copy"  # a second model on the same weights, not preloaded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not SDK_PYTHON.exists(),
        reason=f"{SDK_PYTHON} missing; `bash scripts/install.sh --test` makes it (sie-sdk needs 3.12)",
    ),
]

TEXTS = [
    "A man is eating food.",
    "Hello",
    "Protein expression levels increased in mice treated with the inhibitor.",
    "The girl is carrying a baby.",
]


def run_sdk(url: str, actions: list[dict[str, Any]], timeout_s: float = 120) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(SDK_PYTHON), str(CLIENT), url],
        input=json.dumps(actions),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def ok(entry: dict[str, Any]) -> Any:
    assert entry["ok"], entry["error"]
    return entry["result"]


def array(wire: dict[str, Any]) -> np.ndarray:
    return np.asarray(wire["values"], np.dtype(wire["dtype"])).reshape(wire["shape"])


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    return reference_embeddings(TEXTS, minilm_dir())


def test_single_item(minilm_server: Server, reference: np.ndarray) -> None:
    [entry] = run_sdk(minilm_server.url, [{"op": "encode", "model": MINILM, "items": {"text": TEXTS[0]}}])
    result = ok(entry)
    dense = array(result["dense"])
    assert dense.dtype == np.float32 and dense.shape == (384,)
    assert_close(dense, reference[0])
    assert result["model"] == MINILM
    assert entry["retries"] == 0


def test_batch_keeps_order_and_ids(minilm_server: Server, reference: np.ndarray) -> None:
    items = [{"id": f"doc-{i}", "text": t} for i, t in enumerate(TEXTS)]
    [entry] = run_sdk(minilm_server.url, [{"op": "encode", "model": MINILM, "items": items}])
    results = ok(entry)
    assert [r["id"] for r in results] == [f"doc-{i}" for i in range(len(TEXTS))]
    assert_close(np.stack([array(r["dense"]) for r in results]), reference)


def test_output_dtypes(minilm_server: Server, reference: np.ndarray) -> None:
    items = [{"text": t} for t in TEXTS]
    actions = [
        {"op": "encode", "model": MINILM, "items": items, "kwargs": {"output_dtype": dtype}}
        for dtype in ("float16", "int8", "binary")
    ]
    half, int8, binary = (
        np.stack([array(r["dense"]) for r in ok(e)]) for e in run_sdk(minilm_server.url, actions)
    )
    assert half.dtype == np.float16 and half.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(half.astype(np.float32), reference, atol=1e-3)
    assert int8.dtype == np.int8 and int8.shape == (len(TEXTS), 384)
    want = np.round(reference / np.abs(reference).max(axis=1, keepdims=True) * 127)
    assert np.abs(int8.astype(np.int32) - want).max() <= 1
    assert binary.dtype == np.uint8 and binary.shape == (len(TEXTS), 48)
    np.testing.assert_array_equal(np.unpackbits(binary, axis=1).astype(bool), reference > 0)


def test_query_with_instruction(minilm_server: Server) -> None:
    kwargs = {"is_query": True, "instruction": "Represent the query:"}
    [entry] = run_sdk(
        minilm_server.url, [{"op": "encode", "model": MINILM, "items": {"text": "cells"}, "kwargs": kwargs}]
    )
    assert_close(
        array(ok(entry)["dense"]), reference_embeddings(["Represent the query: cells"], minilm_dir())
    )


def test_list_and_get_model(minilm_server: Server) -> None:
    listed, got = run_sdk(minilm_server.url, [{"op": "list_models"}, {"op": "get_model", "model": MINILM}])
    [info] = [m for m in ok(listed) if m["name"] == MINILM]
    for model in (info, ok(got)):
        assert model["name"] == MINILM
        assert model["dims"]["dense"] == 384
        assert model["loaded"] is True
        assert "dense" in model["outputs"]


def test_unknown_model(minilm_server: Server) -> None:
    actions = [
        {"op": "encode", "model": "no-such/model", "items": {"text": "x"}},
        {"op": "get_model", "model": "no-such/model"},
    ]
    for entry in run_sdk(minilm_server.url, actions):
        assert not entry["ok"]
        error = entry["error"]
        assert error["type"] == "RequestError"
        assert error["code"] == "MODEL_NOT_FOUND"
        assert error["status_code"] == 404


@pytest.fixture(scope="module")
def two_model_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The built-in models plus COPY (same MiniLM weights under another id); only MiniLM preloaded."""
    models_dir = tmp_path_factory.mktemp("models")
    for path in BUILTIN_MODELS_DIR.glob("*.yaml"):
        shutil.copy(path, models_dir / path.name)
    config = yaml.safe_load((BUILTIN_MODELS_DIR / "sentence-transformers__all-MiniLM-L6-v2.yaml").read_text())
    config.update(sie_id=COPY, hf_id=None, hf_revision=None, weights={"path": str(minilm_dir())})
    (models_dir / "copy.yaml").write_text(yaml.safe_dump(config))
    server = Server("--models-dir", str(models_dir), "--preload", MINILM).wait_ready()
    yield server
    assert server.stop() == 0, server.log()
    assert shm_names(server.instance) == []


def test_retries_while_model_loads(two_model_server: Server, reference: np.ndarray) -> None:
    items = [{"id": f"q{i}", "text": t} for i, t in enumerate(TEXTS)]
    before, encoded, after = run_sdk(
        two_model_server.url,
        [
            {"op": "get_model", "model": COPY},
            {"op": "encode", "model": COPY, "items": items},
            {"op": "get_model", "model": COPY},
        ],
    )
    assert ok(before)["loaded"] is False
    results = ok(encoded)
    assert encoded["retries"] >= 1, "the first call should have met 503 MODEL_LOADING and retried"
    assert [r["id"] for r in results] == [f"q{i}" for i in range(len(TEXTS))]
    assert all(r["model"] == COPY for r in results)
    assert_close(np.stack([array(r["dense"]) for r in results]), reference)
    assert ok(after)["loaded"] is True


def test_sdk_scores_extracts_and_reads_sparse_and_multivector(
    families: tuple[Server, dict[str, Path]],
) -> None:
    """Every family through the real SDK, compared with the same server's own JSON answers."""
    from tests.integration.families import COLBERT, GLINER, NER, NLI, RERANKER, SPLADE
    from tests.integration.wire import encode, post

    server, _ = families
    docs = ["Blood pressure rises with salt.", "Paris is the capital of France.", "Exercise lowers it."]
    query = "what raises blood pressure"
    text = "Alice Smith flew from Paris to Berlin."
    actions = [
        {"op": "score", "model": RERANKER, "query": {"text": query}, "items": [{"text": d} for d in docs]},
        {"op": "encode", "model": SPLADE, "items": {"text": query}, "kwargs": {"output_types": ["sparse"]}},
        {
            "op": "encode",
            "model": COLBERT,
            "items": {"text": query},
            "kwargs": {"output_types": ["multivector"], "is_query": True},
        },
        {"op": "extract", "model": NER, "items": {"text": text}},
        {"op": "extract", "model": GLINER, "items": {"text": text}, "kwargs": {"labels": ["person", "city"]}},
        {"op": "extract", "model": NLI, "items": {"text": text}, "kwargs": {"labels": ["travel", "food"]}},
        {"op": "extract", "model": GLINER, "items": {"text": text}},
    ]
    scored, sparse, multi, ner, spans, nli, no_labels = run_sdk(server.url, actions)

    want_scores = post(
        server.url,
        f"/v1/score/{RERANKER}",
        {"query": {"text": query}, "items": [{"text": d} for d in docs]},
        as_json=True,
    ).json()
    got_scores = ok(scored)["scores"]
    assert [(e["item_id"], e["rank"]) for e in got_scores] == [
        (e["item_id"], e["rank"]) for e in want_scores["scores"]
    ]
    np.testing.assert_allclose(
        [e["score"] for e in got_scores], [e["score"] for e in want_scores["scores"]], atol=1e-6
    )

    want_sparse = encode(
        server.url, SPLADE, {"items": [{"text": query}], "params": {"output_types": ["sparse"]}}, as_json=True
    ).json()["items"][0]["sparse"]
    np.testing.assert_array_equal(array(ok(sparse)["sparse"]["indices"]), want_sparse["indices"])
    np.testing.assert_allclose(array(ok(sparse)["sparse"]["values"]), want_sparse["values"], atol=1e-6)

    body = {
        "items": [{"text": query}],
        "params": {"output_types": ["multivector"], "options": {"is_query": True}},
    }
    want_multi = encode(server.url, COLBERT, body, as_json=True).json()["items"][0]["multivector"]["values"]
    np.testing.assert_allclose(array(ok(multi)["multivector"]), want_multi, atol=1e-6)

    for entry, model, params, found in (
        (ner, NER, {}, "entities"),
        (spans, GLINER, {"labels": ["person", "city"]}, "entities"),
        (nli, NLI, {"labels": ["travel", "food"]}, "classifications"),
    ):
        want = post(
            server.url, f"/v1/extract/{model}", {"items": [{"text": text}], "params": params}, as_json=True
        ).json()["items"][0]
        assert want[found], (model, want)  # an empty answer would make the comparison below vacuous
        [got] = ok(entry) if isinstance(ok(entry), list) else [ok(entry)]
        assert got["entities"] == want["entities"] and got["classifications"] == want["classifications"]

    assert not no_labels["ok"] and no_labels["error"]["status_code"] == 400


def test_sdk_extracts_gliclass_classifications(families: tuple[Server, dict[str, Path]]) -> None:
    """`client.extract(model, item, labels=[...])` on a GLiClass model, against the gliclass pipeline."""
    import warnings

    from tests.integration.families import GLICLASS
    from tests.tiny_models.gliclass import pipeline

    server, folders = families
    texts = ["the app crashes on startup when config file is missing", "Charged twice for one order!"]
    labels = ["billing", "bug report", "feature request"]
    multi = {"classification_type": "multi-label"}
    actions = [
        {"op": "extract", "model": GLICLASS, "items": {"text": texts[0]}, "kwargs": {"labels": labels}},
        {
            "op": "extract",
            "model": GLICLASS,
            "items": [{"text": t} for t in texts],
            "kwargs": {"labels": labels, "options": multi},
        },
        {"op": "extract", "model": GLICLASS, "items": {"text": texts[0]}, "kwargs": {"labels": []}},
    ]
    single, multiple, no_labels = run_sdk(server.url, actions)
    assert len(ok(multiple)) == len(texts)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = pipeline(folders[GLICLASS])
    for results, kind in (([ok(single)], "single-label"), (ok(multiple), "multi-label")):
        found = reference(
            texts[: len(results)], labels, threshold=0.0, classification_type=kind, return_hierarchical=True
        )
        for result, want in zip(results, found, strict=True):
            got = result["classifications"]
            assert [c["label"] for c in got] == sorted(want, key=lambda label: -want[label])
            np.testing.assert_allclose([c["score"] for c in got], [want[c["label"]] for c in got], atol=1e-4)
    assert not no_labels["ok"] and no_labels["error"]["status_code"] == 400
