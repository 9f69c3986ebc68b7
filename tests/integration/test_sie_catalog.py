"""SIE's own model YAML files, copied unchanged, served by a real server with weights from an HF cache.

The weights are a tiny random BERT laid out as the Hugging Face cache entry of BAAI/bge-small-en-v1.5
at the revision SIE's file pins; beside that file sit one SIE file this server refuses, one whose
weights are not in the cache, and one that is not YAML at all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from tests.integration.reference import minilm_dir, reference_embeddings
from tests.integration.server import REPO, Server, wait_until
from tests.integration.wire import decode, dense_matrix, encode
from tests.shared_catalog_files import SIE_CATALOG
from tests.tiny_models.dense import TOKENIZER_FILES

pytestmark = pytest.mark.slow

SDK_PYTHON = REPO / ".venv-sdk" / "bin" / "python"
SDK_CLIENT = Path(__file__).with_name("sdk_client.py")
BGE = "BAAI/bge-small-en-v1.5"  # served, weights in the cache
E5 = "intfloat/e5-small-v2"  # served, weights not in the cache
REFUSED_MODEL = "nvidia/nemotron-colembed-vl-4b-v2"  # refused: NVIDIA's vision-language ColEmbed
MALFORMED = "broken/not-yaml"  # the id a file that is not YAML gets from its name
FILES = {
    BGE: "BAAI__bge-small-en-v1.5.yaml",
    E5: "intfloat__e5-small-v2.yaml",
    REFUSED_MODEL: "nvidia__nemotron-colembed-vl-4b-v2.yaml",
}
REFUSED_ADAPTER = "NemoColEmbedAdapter"
TEXTS = ["A man is eating food.", "Hello", "Protein expression levels increased in treated mice."]


@dataclass(frozen=True)
class Lab:
    server: Server
    models: Path
    hub: Path  # the Hugging Face cache the server reads (the hub/ folder of --local-cache)
    weights: Path  # the tiny model's snapshot folder in it
    runtime: dict[str, Any]  # SIE's runtime options of the model's default profile
    max_length: int


def write_snapshot(hub: Path, hf_id: str, revision: str, dim: int, max_length: int) -> Path:
    """A tiny random BERT of hidden size `dim` as the cache entry of `hf_id` at `revision`."""
    import torch
    import transformers

    repo = hub / f"models--{hf_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / revision
    config = transformers.BertConfig(
        vocab_size=30522,
        hidden_size=dim,
        num_hidden_layers=2,
        num_attention_heads=6,
        intermediate_size=2 * dim,
        max_position_embeddings=max_length,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(snapshot)
    for name in TOKENIZER_FILES:
        shutil.copy(minilm_dir() / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not SIE_CATALOG.is_dir():
        pytest.skip("no SIE catalog data")
    root = tmp_path_factory.mktemp("sie-catalog")
    models = root / "models"
    models.mkdir()
    for name in FILES.values():
        shutil.copy(SIE_CATALOG / name, models / name)
    (models / "broken__not-yaml.yaml").write_text("sie_id: broken/not-yaml\nprofiles: [unclosed\n")
    bge = yaml.safe_load((models / FILES[BGE]).read_text())
    [profile] = bge["profiles"].values()  # SIE's file has one profile, "candle"
    runtime = profile["adapter_options"]["runtime"]
    # The reference below is CLS pooling then L2 normalization, as SIE's file declares.
    assert (runtime["pooling"], runtime["normalize"]) == ("cls", True)
    # The server does not compare the weights' hidden size with tasks.encode.dense.dim (it reports
    # the declared dim and returns the model's), so the tiny model is made of the declared size.
    dim, max_length = bge["tasks"]["encode"]["dense"]["dim"], bge["max_sequence_length"]
    home = root / "hf-home"  # HF_HOME-style: the server reads its hub/ folder
    weights = write_snapshot(home / "hub", bge["hf_id"], bge["hf_revision"], dim, max_length)
    server = Server(
        "--models-dir", str(models), "--local-cache", str(home), "--preload", BGE, frontends=1
    ).wait_ready()
    yield Lab(server, models, home / "hub", weights, runtime, max_length)
    assert server.stop() == 0, server.log()


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    detail = response.json()["detail"]
    return response.status_code, detail["code"], detail["message"]


def test_models_lists_served_refused_and_malformed_files(lab: Lab) -> None:
    response = httpx.get(f"{lab.server.url}/v1/models", timeout=10)
    assert response.status_code == 200, response.text
    listed = {m["name"]: m for m in response.json()["models"]}
    # SIE's files name profiles `candle` (BGE's only one, so its default): each is also an id.
    assert set(listed) == {BGE, f"{BGE}:candle", E5, f"{E5}:candle", REFUSED_MODEL, MALFORMED}
    assert listed[f"{E5}:candle"]["profiles"] == {"default": {"is_default": True}}
    bge = listed[BGE]
    assert (bge["supported"], bge["state"], bge["loaded"], bge["dims"]) == (
        True,
        "loaded",
        True,
        {"dense": 384},
    )
    assert bge["profiles"] == {"candle": {"is_default": True}}
    assert (listed[E5]["supported"], listed[E5]["loaded"]) == (True, False)
    for name, cause in ((REFUSED_MODEL, REFUSED_ADAPTER), (MALFORMED, "not readable as YAML")):
        model = listed[name]
        assert (model["supported"], model["state"], model["loaded"]) == (False, "failed", False), model
        assert cause in model["unsupported_reason"], model
        assert model["last_error"] == {"code": "MODEL_LOAD_FAILED", "message": model["unsupported_reason"]}
    one = httpx.get(f"{lab.server.url}/v1/models/{REFUSED_MODEL}", timeout=10).json()
    assert one["supported"] is False and REFUSED_ADAPTER in one["unsupported_reason"]


@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json"])
def test_encode_matches_cls_pooling_with_the_query_template(lab: Lab, as_json: bool) -> None:
    items = [{"text": t} for t in TEXTS]
    documents = encode(lab.server.url, BGE, {"items": items}, as_json=as_json)
    assert documents.status_code == 200, documents.text
    got_documents = dense_matrix(decode(documents))
    queries = encode(
        lab.server.url, BGE, {"items": items, "params": {"options": {"is_query": True}}}, as_json=as_json
    )
    assert queries.status_code == 200, queries.text
    got_queries = dense_matrix(decode(queries))

    def reference(texts: list[str]) -> np.ndarray:
        return reference_embeddings(texts, lab.weights, max_length=lab.max_length, pooling="cls")

    doc_template, query_template = lab.runtime["doc_template"], lab.runtime["query_template"]
    assert got_documents.shape == (len(TEXTS), 384)
    np.testing.assert_allclose(
        got_documents, reference([doc_template.format(text=t) for t in TEXTS]), atol=1e-4
    )
    np.testing.assert_allclose(
        got_queries, reference([query_template.format(text=t) for t in TEXTS]), atol=1e-4
    )
    assert np.abs(got_queries - got_documents).max() > 1e-2  # the template changed the text


@pytest.mark.parametrize(
    ("model", "cause"), [(REFUSED_MODEL, REFUSED_ADAPTER), (MALFORMED, "not readable as YAML")]
)
def test_a_refused_file_answers_502_with_the_reason(lab: Lab, model: str, cause: str) -> None:
    status, code, message = error_of(encode(lab.server.url, model, {"items": [{"text": "hi"}]}, as_json=True))
    assert (status, code) == (502, "MODEL_LOAD_FAILED")
    assert f"Model '{model}' cannot be served by this server" in message and cause in message


def test_weights_missing_from_the_cache_answer_502_naming_the_cache(lab: Lab) -> None:
    def failed() -> tuple[int, str, str] | None:
        answer = error_of(encode(lab.server.url, E5, {"items": [{"text": "hi"}]}, as_json=True))
        assert answer[:2] in ((503, "MODEL_LOADING"), (502, "MODEL_LOAD_FAILED")), answer
        return answer if answer[0] == 502 else None

    _, _, message = wait_until(failed, 60, "the e5 load fails", interval_s=0.2)
    revision = yaml.safe_load((lab.models / FILES[E5]).read_text())["hf_revision"]
    expected = f"'{E5}' (revision {revision}) is not in the local Hugging Face cache {lab.hub}"
    assert expected in message, message
    assert "--hf-fallback" in message, message


def test_an_unknown_model_answers_404(lab: Lab) -> None:
    status, code, _ = error_of(
        encode(lab.server.url, "nobody/nothing", {"items": [{"text": "hi"}]}, as_json=True)
    )
    assert (status, code) == (404, "MODEL_NOT_FOUND")


def test_catalog_command_reports_the_directory(lab: Lab) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sie", "catalog", str(lab.models)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    listed = {BGE, E5, REFUSED_MODEL, MALFORMED}
    lines = done.stdout.splitlines()
    assert lines[-1] == f"2 served, 2 unsupported, {len(list(lab.models.glob('*.yaml')))} in all"
    rows = {line.split()[0]: line.split(maxsplit=1)[1] for line in lines if line.split()[0] in listed}
    assert set(rows) == listed
    assert rows[BGE].split() == ["served", "dense"] and rows[E5].split() == ["served", "dense"]
    assert rows[REFUSED_MODEL].startswith("unsupported") and REFUSED_ADAPTER in rows[REFUSED_MODEL]
    assert rows[MALFORMED].startswith("unsupported") and "not readable as YAML" in rows[MALFORMED]
    assert len(lines) == len(listed) + 1, f"not one line per id:\n{done.stdout}"


@pytest.mark.skipif(not SDK_PYTHON.exists(), reason=f"{SDK_PYTHON} missing; `bash scripts/install.sh --test`")
def test_the_sie_sdk_encodes_with_the_sie_id(lab: Lab) -> None:
    actions = [
        {"op": "encode", "model": BGE, "items": [{"text": t} for t in TEXTS]},
        {"op": "encode", "model": BGE, "items": [{"text": t} for t in TEXTS], "kwargs": {"is_query": True}},
        {"op": "encode", "model": REFUSED_MODEL, "items": {"text": "hi"}},
    ]
    done = subprocess.run(
        [str(SDK_PYTHON), str(SDK_CLIENT), lab.server.url],
        input=json.dumps(actions),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    documents, queries, refused = json.loads(done.stdout)
    for entry, template in ((documents, "doc_template"), (queries, "query_template")):
        assert entry["ok"], entry["error"]
        got = np.stack([np.asarray(r["dense"]["values"], np.float32) for r in entry["result"]])
        texts = [lab.runtime[template].format(text=t) for t in TEXTS]
        want = reference_embeddings(texts, lab.weights, max_length=lab.max_length, pooling="cls")
        np.testing.assert_allclose(got, want, atol=1e-4)
    assert not refused["ok"] and refused["error"]["status_code"] == 502, refused
    assert REFUSED_ADAPTER in refused["error"]["message"], refused
