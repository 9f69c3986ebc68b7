"""GLiNER relex: GlinerRelexAdapter + Runner + the frontend's decoding against the `gliner` package's
own `inference` (entities and relations) on the same tiny random-weight model, float32 on CPU."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.gliner import GlinerPrompts, unique_labels
from sie.frontend.gliner_relex import RelexOptions, adjacency_threshold, decode_item
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.gliner_relex import GlinerRelexAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.gliner import MAX_WIDTH
from tests.tiny_models.gliner_relex import make_gliner_relex, model_yaml_gliner_relex

gliner = pytest.importorskip("gliner")

LAYERS = ["dot", "gcn"]  # gcn mixes the candidates of an item: only the same candidates give the same scores
SCORE_ATOL = 1e-4
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "Hi",
    "Tim Cook met Satya Nadella",
]
# Past max_len (gliner keeps 40 words), and past the cap of 100 relation candidates at a low threshold.
LONG_TEXT = "word " * 60
LABELS = ["person", "location", "organization", "date"]
RELATIONS = ["works at", "lives in", "visited", "met"]

deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        layer: make_gliner_relex(tmp_path_factory.mktemp(f"relex-{layer}"), relations_layer=layer)
        for layer in LAYERS
    }


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, Any]:
    return {
        layer: gliner.GLiNER.from_pretrained(str(f), local_files_only=True) for layer, f in folders.items()
    }


def load(folder: Path) -> GlinerRelexAdapter:
    config = parse_model_config(model_yaml_gliner_relex("tiny/gliner-relex", folder))
    adapter = load_adapter(config, folder, "cpu")
    assert isinstance(adapter, GlinerRelexAdapter)
    return adapter


def run(
    adapter: GlinerRelexAdapter, items: list[tuple[np.ndarray, np.ndarray]], threshold: float
) -> list[np.ndarray]:
    """Each item's rows, from one batch of all the items, the threshold riding in the batch."""
    pending = [
        PendingItem(0, 1, i, ids, None, 0.0, 0, aux=aux, scalar=threshold)
        for i, (ids, aux) in enumerate(items)
    ]
    lengths = [len(ids) for ids, _ in items]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    scores = output[ResultKind.TOKEN_SCORES]
    offsets = scores.row_offsets
    assert offsets is not None and scores.values.dtype == np.float32
    return [scores.values[offsets[i] : offsets[i + 1], 0] for i in range(len(items))]


def ours(
    folder: Path, texts: list[str], labels: list[str], relex: RelexOptions, threshold: float
) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    prompts = GlinerPrompts.from_dir(folder)
    encoded, words = prompts.encode(texts, labels, relex.relation_labels)
    assert encoded.aux is not None
    bounds = list(zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True))
    items = [(encoded.input_ids[s:e], encoded.aux[s:e]) for s, e in bounds]
    rows = run(load(folder), items, threshold)
    labels = unique_labels(labels)
    return [
        decode_item(rows[i], words[i], text, labels, relex, MAX_WIDTH, threshold)
        for i, text in enumerate(texts)
    ]


def reference(
    model: Any, text: str, labels: list[str], relex: RelexOptions, threshold: float
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sentence of length")  # gliner's max_len cut
        entities, relations = model.inference(
            [text],
            labels,
            relations=relex.relation_labels,
            threshold=threshold,
            relation_threshold=relex.relation_threshold,
            adjacency_threshold=adjacency_threshold(threshold),  # what SIE passes
            flat_ner=True,
            multi_label=False,
        )
    return entities[0], relations[0]


def assert_same(got: list[dict[str, Any]], want: list[dict[str, Any]], keys: tuple[str, ...]) -> None:
    # Several spans can share a text (and so a relation its head and tail): order those by score.
    got = sorted(got, key=lambda e: (*(e[k] for k in keys), e["score"]))
    want = sorted(want, key=lambda e: (*(e[k] for k in keys), e["score"]))
    assert [tuple(e[k] for k in keys) for e in got] == [tuple(e[k] for k in keys) for e in want]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=SCORE_ATOL)


def flat_relations(relations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gliner's relation dicts as SIE gives them: head and tail by their text."""
    return [
        {"head": r["head"]["text"], "tail": r["tail"]["text"], "relation": r["relation"], "score": r["score"]}
        for r in relations
    ]


@deterministic
@pytest.mark.parametrize(("threshold", "relation_threshold"), [(0.3, 0.5), (0.5, 0.6), (0.2, 0.7)])
@pytest.mark.parametrize("layer", LAYERS)
def test_entities_and_relations_match_gliner_inference(
    folders: dict[str, Path], models: dict[str, Any], layer: str, threshold: float, relation_threshold: float
) -> None:
    relex = RelexOptions(RELATIONS, relation_threshold)
    got = ours(folders[layer], TEXTS, LABELS, relex, threshold)
    n_entities = n_relations = 0
    for text, (entities, relations) in zip(TEXTS, got, strict=True):
        want_entities, want_relations = reference(models[layer], text, LABELS, relex, threshold)
        assert_same(entities, want_entities, ("start", "end", "text", "label"))
        assert_same(relations, flat_relations(want_relations), ("head", "tail", "relation"))
        assert [r["score"] for r in relations] == sorted((r["score"] for r in relations), reverse=True)
        n_entities, n_relations = n_entities + len(entities), n_relations + len(relations)
    assert n_entities >= 5 and n_relations >= 5  # not a comparison of empty lists


@deterministic
@pytest.mark.parametrize("layer", LAYERS)
def test_relation_sets_differ_per_item_in_one_batch(
    folders: dict[str, Path], models: dict[str, Any], layer: str
) -> None:
    jobs = [(TEXTS[0], ["works at"]), (TEXTS[1], RELATIONS), (TEXTS[2], []), (TEXTS[1], ["visited", "met"])]
    prompts = GlinerPrompts.from_dir(folders[layer])
    items, words = [], []
    for text, relations in jobs:
        encoded, found = prompts.encode([text], LABELS, relations)
        assert encoded.aux is not None
        items.append((encoded.input_ids, encoded.aux))
        words.append(found[0])
    rows = run(load(folders[layer]), items, 0.3)
    for (text, relations), item_words, item_rows in zip(jobs, words, rows, strict=True):
        relex = RelexOptions(relations, 0.5)
        entities, got = decode_item(item_rows, item_words, text, LABELS, relex, MAX_WIDTH, 0.3)
        want_entities, want_relations = reference(models[layer], text, LABELS, relex, 0.3)
        assert_same(entities, want_entities, ("start", "end", "text", "label"))
        assert_same(got, flat_relations(want_relations), ("head", "tail", "relation"))
        if not relations:
            assert got == [] and len(item_rows) == len(item_words) * MAX_WIDTH * len(LABELS)


@deterministic
def test_candidate_cap_keeps_a_subset_of_the_relations(
    folders: dict[str, Path], models: dict[str, Any]
) -> None:
    """gliner scores every candidate pair; SIE (and this server) the first 100 candidates' pairs. With
    the dot adjacency a pair's scores do not depend on the other candidates, so each relation kept is
    one of gliner's, at its score, and the entities are untouched."""
    relex = RelexOptions(RELATIONS, 0.5)
    ((entities, relations),) = ours(folders["dot"], [LONG_TEXT], LABELS, relex, 0.1)
    want_entities, want_relations = reference(models["dot"], LONG_TEXT, LABELS, relex, 0.1)
    assert_same(entities, want_entities, ("start", "end", "text", "label"))
    prompts = GlinerPrompts.from_dir(folders["dot"])
    _, words = prompts.encode([LONG_TEXT], LABELS, RELATIONS)
    assert len(words[0]) * MAX_WIDTH > 100  # more spans than the cap, nearly all candidates at 0.1
    want_scores = sorted(r["score"] for r in want_relations)
    assert 0 < len(relations) < len(want_scores)
    for relation in relations:
        position = int(np.searchsorted(want_scores, relation["score"] - SCORE_ATOL))
        assert position < len(want_scores) and abs(want_scores[position] - relation["score"]) <= SCORE_ATOL
