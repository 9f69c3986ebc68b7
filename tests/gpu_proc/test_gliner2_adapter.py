"""Gliner2Adapter + Runner + the frontend's prompt and decode against the `gliner2` package's own
extraction (`batch_extract_entities`, `batch_classify_text`) on the same tiny random weights."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend import gliner2_structure as structure
from sie.frontend.gliner2 import Gliner2Prompts, Schema, entity_schema
from sie.frontend.gliner2_decode import classes, entities, split_values
from sie.frontend.tokenize import Encoded
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.adapters.gliner2 import Gliner2Adapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.gliner2 import MAX_WIDTH, load_reference, make_gliner2, model_yaml_gliner2

pytest.importorskip("gliner2")

SCORE_ATOL = 1e-4
THRESHOLD = 0.45
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004",
    "Apple bought Beats for $3 billion!",
    "Hi",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021, see https://x.org or mail a@b.co.",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron ",
    "Zoe\u0308 Mu\u0308ller flew from \u0130stanbul to Krak\u00f3w",  # marks in words; a longer lowercase
    "Hello \x07 Paris \ufeffBOM\u200b Lyon",  # words with no sub-token
    "",
]
LABEL_SETS = [["person", "location", "organization"], ["city"], ["first name", "date", "company", "email"]]
CLASS_SETS = [["positive", "negative", "neutral"], ["safe", "unsafe"], ["sports", "politics", "tech", "food"]]

deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner2(tmp_path_factory.mktemp("gliner2"))


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    return load_reference(folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Gliner2Adapter:
    config = parse_model_config(model_yaml_gliner2("tiny/gliner2", folder))
    loaded = load_adapter(config, folder, "cpu")
    assert isinstance(loaded, Gliner2Adapter)
    return loaded


@pytest.fixture(scope="module")
def prompts(folder: Path) -> Gliner2Prompts:
    return Gliner2Prompts.from_dir(folder, 512)


def run(
    adapter: Gliner2Adapter,
    prompts: Gliner2Prompts,
    texts: list[str],
    schema: Schema,
    prefix: list[str] | None = None,
) -> list[Any]:
    """Each text's values for `schema` (and the words read), all texts in one batch."""
    encoded, read = prompts.encode(texts, [schema], prefix or [])
    return [
        (split_values(values, [schema], words.n_read, MAX_WIDTH)[0], words)
        for values, words in zip(forward_rows(adapter, [encoded]), read, strict=True)
    ]


def forward_rows(adapter: Adapter, encoded: list[Encoded]) -> list[np.ndarray]:
    """Every row of these encodings through the Runner in one batch: each row's output values."""
    pending = []
    for enc in encoded:
        assert enc.aux is not None
        for s, e in itertools.pairwise(enc.offsets):
            ids, aux = enc.input_ids[s:e], enc.aux[s:e]
            pending.append(PendingItem(0, 1, len(pending), ids, None, 0.0, 0, aux=aux))
    lengths = [len(p.input_ids) for p in pending]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    scores = output[ResultKind.TOKEN_SCORES]
    assert scores.row_offsets is not None and scores.values.dtype == np.float32
    return [scores.values[a:b] for a, b in itertools.pairwise(scores.row_offsets)]


def reference_entities(reference: Any, texts: list[str], labels: list[str], threshold: float) -> list[Any]:
    """gliner2's entities flattened as SIE's adapter flattens them (spans clipped to the text)."""
    raw = reference.batch_extract_entities(
        texts, labels, threshold=threshold, include_confidence=True, include_spans=True
    )
    return reference_entities_of(raw, texts)


def reference_entities_of(raw: list[Any], texts: list[str]) -> list[Any]:
    out = []
    for text, result in zip(texts, raw, strict=True):
        found = [
            {"label": label, "start": s["start"], "end": min(s["end"], len(text)), "score": s["confidence"]}
            for label, spans in result.get("entities", {}).items()
            for s in spans
            if s["start"] < len(text)  # wholly inside the "." gliner2 appends: SIE cannot place it
        ]
        found.sort(key=lambda e: e["start"])
        out.append(found)
    return out


def assert_same_entities(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], text: str) -> None:
    assert [(e["label"], e["start"], e["end"]) for e in ours] == [
        (e["label"], e["start"], e["end"]) for e in theirs
    ]
    np.testing.assert_allclose([e["score"] for e in ours], [e["score"] for e in theirs], atol=SCORE_ATOL)
    assert all(e["text"] == text[e["start"] : e["end"]] for e in ours)


@deterministic
@pytest.mark.parametrize("labels", LABEL_SETS, ids=lambda labels: "-".join(labels))
def test_entities_match_gliner2(
    adapter: Gliner2Adapter, prompts: Gliner2Prompts, reference: Any, labels: list[str]
) -> None:
    theirs = reference_entities(reference, TEXTS, labels, THRESHOLD)
    ours = [
        entities(scores, labels, words, text, THRESHOLD)
        for (scores, words), text in zip(
            run(adapter, prompts, TEXTS, Schema("entities", "entities", tuple(labels))), TEXTS, strict=True
        )
    ]
    assert sum(len(found) for found in theirs) > 3  # the random model finds something to compare
    for mine, other, text in zip(ours, theirs, TEXTS, strict=True):
        assert_same_entities(mine, other, text)


@deterministic
def test_entity_descriptions_match_gliner2(
    adapter: Gliner2Adapter, prompts: Gliner2Prompts, reference: Any
) -> None:
    labels = LABEL_SETS[0]
    descriptions = {"person": "a human being, by name", "organization": "a company or school"}
    raw = reference.batch_extract_entities(
        TEXTS,
        {k: descriptions.get(k, {}) for k in labels},
        threshold=THRESHOLD,
        include_confidence=True,
        include_spans=True,
    )
    plain = [
        entities(s, labels, w, t, THRESHOLD)
        for (s, w), t in zip(run(adapter, prompts, TEXTS, entity_schema(labels, {})), TEXTS, strict=True)
    ]
    ours = [
        entities(s, labels, w, t, THRESHOLD)
        for (s, w), t in zip(
            run(adapter, prompts, TEXTS, entity_schema(labels, descriptions)), TEXTS, strict=True
        )
    ]
    theirs = reference_entities_of(raw, TEXTS)
    assert ours != plain  # the descriptions reached the model
    for mine, other, text in zip(ours, theirs, TEXTS, strict=True):
        assert_same_entities(mine, other, text)


@deterministic
def test_entities_alone_equal_in_a_batch(adapter: Gliner2Adapter, prompts: Gliner2Prompts) -> None:
    schema = Schema("entities", "entities", tuple(LABEL_SETS[0]))
    batch = run(adapter, prompts, [TEXTS[0], TEXTS[3], TEXTS[0]], schema)
    alone = run(adapter, prompts, [TEXTS[0]], schema)
    for scores, _ in (batch[0], batch[2]):
        np.testing.assert_allclose(scores, alone[0][0], atol=1e-5)


@deterministic
@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("labels", CLASS_SETS, ids=lambda labels: "-".join(labels))
def test_classes_match_gliner2(
    adapter: Gliner2Adapter, prompts: Gliner2Prompts, reference: Any, labels: list[str], multi_label: bool
) -> None:
    threshold = 0.2
    task = {"sentiment": {"labels": labels, "multi_label": multi_label, "cls_threshold": threshold}}
    raw = reference.batch_classify_text(TEXTS, task, threshold=threshold, include_confidence=True)
    ran = run(adapter, prompts, TEXTS, Schema("classification", "sentiment", tuple(labels)))
    for (logits, _), result in zip(ran, raw, strict=True):
        found = result["sentiment"]
        theirs = sorted(
            [(c["label"], c["confidence"]) for c in (found if isinstance(found, list) else [found])],
            key=lambda c: -c[1],
        )
        theirs = [c for c in theirs if c[1] >= threshold]
        ours = classes(logits, labels, multi_label=multi_label, threshold=threshold)
        assert [c["label"] for c in ours] == [label for label, _ in theirs]
        np.testing.assert_allclose([c["score"] for c in ours], [s for _, s in theirs], atol=SCORE_ATOL)


OUTPUT_SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the person's name"},
            "places": {"type": "array", "items": {"type": "string"}},
            "mood": {"type": "string", "enum": ["happy", "sad", "angry"]},
        },
    },
    {
        "type": "object",
        "properties": {
            "buyer": {"type": "string"},
            "price": {"type": "string", "title": "how much"},
            "kind": {"type": "string", "enum": ["merger", "purchase"]},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "topics::keywords"},
        },
    },
]


def reference_data(
    reference: Any, texts: list[str], output_schema: dict[str, Any], threshold: float
) -> list[Any]:
    """gliner2's structure, through SIE's field specs; the first instance, fields without a value left out."""
    specs = [structure._field_spec(name, d) for name, d in output_schema["properties"].items()]
    raw = reference.batch_extract_json(texts, {structure.ROOT: specs}, threshold=threshold)
    out = []
    for result in raw:
        instances = result.get(structure.ROOT) or []
        first = instances[0] if isinstance(instances, list) and instances else {}
        out.append({k: v for k, v in first.items() if v is not None})
    return out


@deterministic
@pytest.mark.parametrize("output_schema", OUTPUT_SCHEMAS, ids=["person", "deal"])
@pytest.mark.parametrize("threshold", [0.3, 0.5])
def test_structures_match_gliner2(
    adapter: Gliner2Adapter,
    prompts: Gliner2Prompts,
    reference: Any,
    output_schema: dict[str, Any],
    threshold: float,
) -> None:
    fields = structure.parse_output_schema(output_schema)
    order = [f.name for f in fields]  # gliner2 2.x prompts the fields as declared
    schema, prefix = structure.prompt(fields, order)
    ran = run(adapter, prompts, TEXTS, schema, prefix)
    ours = [structure.decode(scores, fields, order, words, threshold) for scores, words in ran]
    theirs = reference_data(reference, TEXTS, output_schema, threshold)
    assert any(theirs)
    assert ours == theirs


@deterministic
def test_a_text_filling_the_word_window_matches_gliner2s_max_len(
    adapter: Gliner2Adapter, folder: Path, reference: Any
) -> None:
    text = TEXTS[0]  # 14 words and no sentence end: gliner2's max_len=14 drops the "." it appends
    labels = LABEL_SETS[0]
    window = Gliner2Prompts.from_dir(folder, 14)
    [(scores, words)] = run(adapter, window, [text], Schema("entities", "entities", tuple(labels)))
    assert len(words.spans) == 14
    raw = reference.batch_extract_entities(
        [text], labels, threshold=THRESHOLD, include_confidence=True, include_spans=True, max_len=14
    )
    theirs = [
        {"label": label, "start": s["start"], "end": s["end"], "score": s["confidence"]}
        for label, spans in raw[0]["entities"].items()
        for s in spans
    ]
    theirs.sort(key=lambda e: e["start"])
    assert theirs
    assert_same_entities(entities(scores, labels, words, text, THRESHOLD), theirs, text)


@deterministic
@pytest.mark.parametrize("multi_label", [False, True])
def test_each_classification_window_matches_gliner2(
    adapter: Gliner2Adapter, folder: Path, reference: Any, multi_label: bool
) -> None:
    from sie.frontend.gliner2_windows import windows
    from sie.frontend.tasks.extract import ExtractJob
    from sie.frontend.tasks.extract_gliner2 import plan

    text = " ".join(TEXTS[:5])  # longer than one window of 16 words
    loadtime = {
        "classification_task": "prompt_safety",
        "default_labels": ["safe", "unsafe"],
        "positive_label": "unsafe",
    }
    task = plan(
        ExtractJob(texts=[text], labels=None, options={"multi_label": multi_label, "threshold": 0.3}),
        loadtime,
    )
    pieces = windows(text, 16)
    assert len(pieces) > 2
    rows = [
        task.decode(scores, words, text)
        for scores, words in run(adapter, Gliner2Prompts.from_dir(folder, 16), pieces, task.schema)
    ]
    tasks = {
        "prompt_safety": {"labels": ["safe", "unsafe"], "multi_label": multi_label, "cls_threshold": 0.3}
    }
    raw = reference.batch_classify_text(pieces, tasks, threshold=0.3, include_confidence=True, max_len=16)
    for ours, result in zip(rows, raw, strict=True):
        found = result["prompt_safety"]
        theirs = [(c["label"], c["confidence"]) for c in (found if isinstance(found, list) else [found])]
        assert [label for label, _ in ours] == [label for label, _ in theirs]
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in theirs], atol=SCORE_ATOL)
    assert task.combine(rows)["classifications"]


@deterministic
def test_a_batch_mixing_tasks_gives_each_item_its_own(
    adapter: Gliner2Adapter, prompts: Gliner2Prompts
) -> None:
    tasks = [
        Schema("entities", "entities", ("person", "city")),
        Schema("classification", "topic", ("a", "b", "c")),
        Schema("entities", "entities", ("company",)),
    ]
    rows = [prompts.encode([TEXTS[i]], [schema]) for i, schema in enumerate(tasks)]
    pending = [
        PendingItem(0, 1, i, encoded.input_ids, None, 0.0, 0, aux=encoded.aux)
        for i, (encoded, _) in enumerate(rows)
    ]
    lengths = [len(p.input_ids) for p in pending]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    mixed = output[ResultKind.TOKEN_SCORES]
    assert mixed.row_offsets is not None
    for i, schema in enumerate(tasks):
        [(alone, _)] = run(adapter, prompts, [TEXTS[i]], schema)
        got = split_values(
            mixed.values[mixed.row_offsets[i] : mixed.row_offsets[i + 1]],
            [schema],
            rows[i][1][0].n_read,
            MAX_WIDTH,
        )[0]
        np.testing.assert_allclose(got, alone, atol=1e-5)
