"""Models whose tokenizer is only in slow form, end to end: a real server converts it once while the
model loads, and serves what the family's own package computes on the same files.

- a GLiNER whose folder holds spm.model (no tokenizer.json), against gliner's predict_entities;
- a GLiREL saved as glirel saves one (no tokenizer), its config naming its encoder by a Hub id whose
  cached snapshot holds spm.model only (as jackboyla/glirel-large-v0 names microsoft/deberta-v3-large),
  against glirel's predict_relations;
- a GLiREL naming an encoder missing from the cache, and a model with no tokenizer at all: 502
  MODEL_LOAD_FAILED naming where the server looked.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.integration.server import Server, shm_names, wait_until
from tests.integration.test_errors import error_of
from tests.integration.wire import decode, encode, post
from tests.tiny_models.slow_tokenizers import make_gliner_spm, make_glirel_spm, model_yaml_gliner_spm

pytestmark = pytest.mark.slow

GLINER = "tiny/gliner-spm"
GLIREL = "tiny/glirel-spm"
GLIREL_MISSING = "tiny/glirel-missing-encoder"
BARE = "tiny/no-tokenizer"
ENCODER_ID = "org/deberta-v3-tiny"
ABSENT_ID = "org/absent-encoder"
REVISION = "d" * 40
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "Paris is nice.",
]
LABELS = ["person", "location", "organization", "date"]
ENTITIES = [{"start": 0, "end": 8}, {"start": 13, "end": 26}]


@dataclass(frozen=True)
class Lab:
    server: Server
    hub: Path
    folders: dict[str, Path]


def published(checkpoint: Path, folder: Path, encoder: str) -> Path:
    """The GLiREL checkpoint as a published one names its encoder: by a Hub id."""
    shutil.copytree(checkpoint, folder)
    config = json.loads((folder / "glirel_config.json").read_text())
    (folder / "glirel_config.json").write_text(json.dumps({**config, "model_name": encoder}))
    return folder


def cache(hub: Path, hf_id: str, source: Path) -> None:
    repo = hub / ("models--" + hf_id.replace("/", "--"))
    shutil.copytree(source, repo / "snapshots" / REVISION)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)


def bare_encoder(folder: Path) -> Path:
    """A tiny BERT with no tokenizer files at all."""
    import transformers

    config = transformers.BertConfig(
        vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    )
    transformers.BertModel(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    pytest.importorskip("gliner")
    pytest.importorskip("glirel")
    root = tmp_path_factory.mktemp("slow-tokenizers")
    hub = root / "hub"
    hub.mkdir()
    checkpoint = make_glirel_spm(root / "glirel-local", root / "encoder")
    cache(hub, ENCODER_ID, root / "encoder")
    folders = {
        GLINER: make_gliner_spm(root / "gliner"),
        GLIREL: published(checkpoint, root / "glirel", ENCODER_ID),
        GLIREL_MISSING: published(checkpoint, root / "glirel-missing", ABSENT_ID),
        BARE: bare_encoder(root / "bare"),
        "local": checkpoint,
    }
    yamls = {
        GLINER: model_yaml_gliner_spm(GLINER, folders[GLINER]),
        GLIREL: {"sie_id": GLIREL, "weights": {"path": str(folders[GLIREL])}, "tasks": {"extract": {}}},
        GLIREL_MISSING: {"sie_id": GLIREL_MISSING, "weights": {"path": str(folders[GLIREL_MISSING])}},
        BARE: {"sie_id": BARE, "weights": {"path": str(folders[BARE])}},
    }
    yamls[GLIREL_MISSING]["tasks"] = {"extract": {}}
    yamls[GLIREL]["adapter"] = yamls[GLIREL_MISSING]["adapter"] = "glirel"
    yamls[BARE] |= {"tasks": {"encode": {"dense": {"dim": 16}}}, "adapter": "dense"}
    models = root / "models"
    models.mkdir()
    for sie_id, raw in yamls.items():
        (models / f"{sie_id.replace('/', '__')}.yaml").write_text(yaml.safe_dump(raw))
    args = ["--models-dir", str(models), "--local-cache", str(hub), "--preload", f"{GLINER},{GLIREL},{BARE}"]
    server = Server(*args, frontends=1).wait_ready(180)
    yield Lab(server, hub, folders)
    code = server.stop()
    assert code == 0, server.log()
    assert shm_names(server.instance) == []


def test_gliner_with_spm_only_matches_predict_entities(lab: Lab) -> None:
    import gliner

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = gliner.GLiNER.from_pretrained(str(lab.folders[GLINER]), local_files_only=True)
    found = 0
    for threshold in (0.5, 0.7):
        body = {
            "items": [{"text": t} for t in TEXTS],
            "params": {"labels": LABELS, "options": {"threshold": threshold}},
        }
        response = post(lab.server.url, f"/v1/extract/{GLINER}", body, as_json=False)
        assert response.status_code == 200, response.text
        for item, text in zip(decode(response)["items"], TEXTS, strict=True):
            want = reference.predict_entities(text, LABELS, threshold=threshold)
            got = item["entities"]
            assert [(e["label"], e["start"], e["end"], e["text"]) for e in got] == [
                (w["label"], w["start"], w["end"], w["text"]) for w in want
            ]
            np.testing.assert_allclose([e["score"] for e in got], [w["score"] for w in want], atol=1e-4)
            found += len(got)
    assert found >= 3
    # Converted into sie's own folder of the cache; the model's folder is left as it was.
    assert not (lab.folders[GLINER] / "tokenizer.json").exists()
    assert len(list((lab.hub / ".sie" / "tokenizers").glob("gliner/*/tokenizer.json"))) == 1


def test_glirel_reads_its_cached_encoders_spm_tokenizer(lab: Lab) -> None:
    from tests.gpu_proc.test_glirel_adapter import ITEMS, assert_same, load_reference, reference
    from tests.gpu_proc.test_glirel_adapter import LABELS as RELATIONS
    from tests.tiny_models.glirel import THRESHOLD

    model = load_reference(lab.folders["local"])  # the same encoder files, named by their folder
    items = [{"id": str(i), "text": t, "metadata": {"entities": e}} for i, (t, e) in enumerate(ITEMS)]
    response = post(
        lab.server.url,
        f"/v1/extract/{GLIREL}",
        {"items": items, "params": {"labels": RELATIONS}},
        as_json=True,
    )
    assert response.status_code == 200, response.text
    labels = list(dict.fromkeys(RELATIONS))
    total = 0
    for (text, entities), item in zip(ITEMS, decode(response)["items"], strict=True):
        assert_same(item["relations"], reference(model, text, entities, labels, THRESHOLD, 10))
        total += len(item["relations"])
    assert total >= 3
    snapshot = lab.hub / "models--org--deberta-v3-tiny" / "snapshots" / REVISION
    assert not (snapshot / "tokenizer.json").exists()
    assert list((lab.hub / ".sie" / "tokenizers" / "models--org--deberta-v3-tiny").glob("*/tokenizer.json"))


def test_an_encoder_missing_from_the_cache_answers_502_naming_it(lab: Lab) -> None:
    body = {
        "items": [{"text": "Tim Cook met Satya Nadella", "metadata": {"entities": ENTITIES}}],
        "params": {"labels": ["met"]},
    }

    def failed() -> tuple[int, str, str] | None:
        answer = error_of(post(lab.server.url, f"/v1/extract/{GLIREL_MISSING}", body, as_json=True))
        assert answer[:2] in ((503, "MODEL_LOADING"), (502, "MODEL_LOAD_FAILED")), answer
        return answer if answer[0] == 502 else None

    _, _, message = wait_until(failed, 60, "the GLiREL load fails", interval_s=0.2)
    assert ABSENT_ID in message and str(lab.hub) in message and "--hf-fallback" in message, message


def test_a_model_without_any_tokenizer_answers_502_naming_its_folder(lab: Lab) -> None:
    status, code, message = error_of(encode(lab.server.url, BARE, {"items": [{"text": "hi"}]}, as_json=True))
    assert (status, code) == (502, "MODEL_LOAD_FAILED")
    assert str(lab.folders[BARE]) in message and "no tokenizer.json" in message and "spm.model" in message
