"""GLiNER2.5 boundary checkpoints: Gliner2BoundaryAdapter + Runner + the frontend's rows and decode
against gliner2 2.x's own `batch_extract_entities` on the same tiny random weights."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.gliner2 import Limits, entity_schema
from sie.frontend.gliner2_boundary import BoundaryPrompts, entities, resolve_overlaps
from sie.gliner2_checkpoint import OVERLAP_POLICIES, Gliner2Checkpoint
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.gliner2_boundary import Gliner2BoundaryAdapter, row_positions
from sie.model_config import parse_model_config
from tests.gpu_proc.test_gliner2_adapter import forward_rows
from tests.tiny_models.gliner2 import load_boundary_reference, make_gliner2_boundary, model_yaml_gliner2

gliner2 = pytest.importorskip("gliner2")
if int(gliner2.__version__.split(".")[0]) < 2:
    pytest.skip("boundary checkpoints need gliner2 2.x", allow_module_level=True)

TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004",
    "Apple bought Beats for $3 billion!",
    "Hi",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021, see https://x.org or mail a@b.co.",
    "Zoe\u0308 Mu\u0308ller flew from \u0130stanbul to Kraków with Ann\u200dMarie",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron ",
    "Hello \x07 Paris \ufeffBOM\u200b Lyon",  # words with no sub-token share the next word's position
    "",
]
LABEL_SETS = [["person", "location", "organization"], ["city"], ["First Name", "date", "company", "e-mail"]]
# The tiny head scores most candidates in (0.9, 1): thresholds there separate them.
THRESHOLDS = [0.5, 0.93, 0.96]
HEADS: dict[str, dict[str, Any]] = {
    "per_query": {},
    "shared": {"candidate_pool": "shared"},
    "nested_adaptive": {"overlap_policy": "nested", "adaptive_threshold": True},
}

deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module", params=list(HEADS))
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner2_boundary(tmp_path_factory.mktemp(f"boundary-{request.param}"), **HEADS[request.param])


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    return load_boundary_reference(folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Gliner2BoundaryAdapter:
    config = parse_model_config(model_yaml_gliner2("tiny/gliner2.5", folder))
    loaded = load_adapter(config, folder, "cpu")
    assert isinstance(loaded, Gliner2BoundaryAdapter)
    return loaded


@pytest.fixture(scope="module")
def prompts(folder: Path) -> BoundaryPrompts:
    return BoundaryPrompts.from_dir(folder, 512)


def served(
    adapter: Gliner2BoundaryAdapter,
    prompts: BoundaryPrompts,
    checkpoint: Gliner2Checkpoint,
    texts: list[str],
    labels: list[str],
    threshold: float,
    descriptions: dict[str, str] | None = None,
) -> list[list[dict[str, Any]]]:
    """Every text's entities as the server decodes them, all texts in one batch."""
    encoded, read = prompts.encode(texts, [entity_schema(labels, descriptions or {})])
    return [
        entities(values, labels, words, text, threshold, checkpoint)
        for values, words, text in zip(forward_rows(adapter, [encoded]), read, texts, strict=True)
    ]


def reference_entities(
    reference: Any, texts: list[str], labels: list[str] | dict[str, str], threshold: float
) -> list[list[dict[str, Any]]]:
    """gliner2's entities, flattened as SIE flattens them: spans clipped to the caller's text (one
    wholly inside the "." gliner2 appends is dropped), sorted by start."""
    raw = reference.batch_extract_entities(
        texts, labels, batch_size=len(texts), threshold=threshold, include_confidence=True, include_spans=True
    )
    out = []
    for text, result in zip(texts, raw, strict=True):
        found = [
            {"label": label, "start": s["start"], "end": min(s["end"], len(text)), "score": s["confidence"]}
            for label, spans in result.get("entities", {}).items()
            for s in spans
            if s["start"] < len(text)
        ]
        found.sort(key=lambda e: e["start"])
        out.append(found)
    return out


def comparable(found: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    return [[{k: e[k] for k in ("label", "start", "end", "score")} for e in item] for item in found]


@deterministic
@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("labels", LABEL_SETS, ids=["ner", "one", "cased"])
def test_entities_match_gliner2(
    folder: Path,
    adapter: Gliner2BoundaryAdapter,
    prompts: BoundaryPrompts,
    reference: Any,
    labels: list[str],
    threshold: float,
) -> None:
    ours = comparable(served(adapter, prompts, Gliner2Checkpoint.read(folder), TEXTS, labels, threshold))
    theirs = reference_entities(reference, TEXTS, labels, threshold)
    assert any(theirs)
    assert [[(e["label"], e["start"], e["end"]) for e in item] for item in ours] == [
        [(e["label"], e["start"], e["end"]) for e in item] for item in theirs
    ]
    for mine, want in zip(itertools.chain(*ours), itertools.chain(*theirs), strict=True):
        assert mine["score"] == pytest.approx(want["score"], abs=1e-5)


@deterministic
def test_descriptions_go_into_the_prompt_as_gliner2_writes_them(
    folder: Path, adapter: Gliner2BoundaryAdapter, prompts: BoundaryPrompts, reference: Any
) -> None:
    labels = ["person", "city", "company"]
    descriptions = {"person": "a human being, by name", "company": "a business"}
    threshold = THRESHOLDS[1]
    checkpoint = Gliner2Checkpoint.read(folder)
    ours = comparable(served(adapter, prompts, checkpoint, TEXTS, labels, threshold, descriptions))
    theirs = reference_entities(reference, TEXTS, {k: descriptions.get(k, {}) for k in labels}, threshold)
    assert [[(e["label"], e["start"], e["end"]) for e in item] for item in ours] == [
        [(e["label"], e["start"], e["end"]) for e in item] for item in theirs
    ]
    plain = comparable(served(adapter, prompts, checkpoint, TEXTS, labels, threshold))
    assert plain != ours  # the descriptions reached the model


def test_rows_match_gliner2s_processor(folder: Path, reference: Any) -> None:
    """Ids, word positions (as the device reads them from the aux) and [E] positions equal the
    collated batch gliner2 2.x builds: words with combining marks, dotted capitals and no
    sub-token included."""
    labels = LABEL_SETS[2]
    prompts = BoundaryPrompts.from_dir(folder, 512)
    encoded, read = prompts.encode(TEXTS, [entity_schema(labels, {})])
    batch = reference.processor.collate_fn_inference(
        [(t, {"entities": dict.fromkeys(labels, "")}) for t in TEXTS], architecture="boundary"
    )
    assert encoded.aux is not None
    for i, (s, e) in enumerate(itertools.pairwise(encoded.offsets)):
        ids, aux = encoded.input_ids[s:e], encoded.aux[s:e]
        n = int(batch.attention_mask[i].sum())
        assert ids.tolist() == batch.input_ids[i, :n].tolist()
        words = int(batch.text_word_mask[i].sum())
        positions, queries_at = row_positions(torch.from_numpy(aux.astype(np.int64)))
        assert positions.tolist() == batch.text_word_indices[i, :words].tolist()
        assert list(zip(batch.start_mappings[i], batch.end_mappings[i], strict=True)) == read[i].spans
        queries = int(batch.query_marker_mask[i].sum())
        assert queries_at.tolist() == batch.query_marker_indices[i, :queries].tolist()


def test_row_limits_follow_the_profile(folder: Path) -> None:
    raw = {**model_yaml_gliner2("tiny/gliner2.5", folder), "max_sequence_length": 64}
    loadtime = {"max_prompt_tokens": 16}
    raw["profiles"] = {"default": {"adapter": raw.pop("adapter"), "adapter_options": {"loadtime": loadtime}}}
    config = parse_model_config(raw)
    limits = BoundaryPrompts.for_model(config).limits
    assert limits == Limits(max_words=256, max_text_tokens=64, max_prompt_tokens=16, max_row_tokens=64)


@pytest.mark.parametrize("policy", sorted(set(OVERLAP_POLICIES.values())))
def test_overlap_rules_match_gliner2(policy: str) -> None:
    from gliner2.inference.overlap import resolve_overlaps as reference

    rng = random.Random(policy)
    for _ in range(300):
        spans = []
        for _ in range(rng.randint(0, 12)):
            start = rng.randint(0, 10)
            spans.append((rng.choice([0.5, 0.6, 0.7, rng.random()]), start, start + rng.randint(1, 4)))
        want = reference(spans, policy, score=lambda s: s[0], start=lambda s: s[1], end=lambda s: s[2])
        assert resolve_overlaps(spans, policy) == want, spans


@deterministic
def test_a_checkpoint_decoding_by_count_keeps_its_best_above_any_threshold(
    folder: Path, adapter: Gliner2BoundaryAdapter, prompts: BoundaryPrompts, reference: Any
) -> None:
    """At threshold 1.0 only the head's predicted count keeps spans: some for a checkpoint saved
    with adaptive_threshold, none for the others; either way what gliner2 keeps."""
    adaptive = json.loads((folder / "config.json").read_text())["boundary_head"]["adaptive_threshold"]
    labels = LABEL_SETS[0]
    checkpoint = Gliner2Checkpoint.read(folder)
    ours = comparable(served(adapter, prompts, checkpoint, TEXTS, labels, 1.0))
    theirs = reference_entities(reference, TEXTS, labels, 1.0)
    assert any(ours) == adaptive
    assert [[(e["label"], e["start"], e["end"]) for e in item] for item in ours] == [
        [(e["label"], e["start"], e["end"]) for e in item] for item in theirs
    ]


@deterministic
def test_a_text_finds_the_same_alone_and_in_a_batch_of_other_requests(
    folder: Path, adapter: Gliner2BoundaryAdapter, prompts: BoundaryPrompts
) -> None:
    """Rows of requests with other label counts and lengths share a forward without changing what
    each row finds: the server batches requests together."""
    checkpoint = Gliner2Checkpoint.read(folder)
    asks = [(text, LABEL_SETS[i % len(LABEL_SETS)]) for i, text in enumerate(TEXTS)]
    alone = [served(adapter, prompts, checkpoint, [text], labels, THRESHOLDS[1])[0] for text, labels in asks]
    rows = [prompts.encode([text], [entity_schema(labels, {})]) for text, labels in asks]
    values = forward_rows(adapter, [encoded for encoded, _ in rows])
    together = [
        entities(v, labels, read[0], text, THRESHOLDS[1], checkpoint)
        for v, (text, labels), (_, read) in zip(values, asks, rows, strict=True)
    ]
    assert any(alone)
    assert [[(e["label"], e["start"], e["end"]) for e in item] for item in together] == [
        [(e["label"], e["start"], e["end"]) for e in item] for item in alone
    ]
    for mine, want in zip(itertools.chain(*together), itertools.chain(*alone), strict=True):
        assert mine["score"] == pytest.approx(want["score"], abs=1e-5)
