"""GLiNER unions end to end in process (the extract runner, the ring layout, a batcher and
GlinerUnionAdapter) against the `gliner` package's predict_entities on each member and window,
composed as SIE's recipe says; and the requests refused."""

from __future__ import annotations

import asyncio
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.tasks.extract import ExtractJob
from sie.frontend.tasks.extract_gliner_union import run_gliner_union
from sie.frontend.wire import Item
from sie.gliner_union import UnionOptions, union_options
from tests.gpu_proc.adapter_devices import in_process
from tests.tiny_models.gliner_union import (
    DEFAULT_LABELS,
    FIRST,
    SECOND,
    make_gliner_union,
    model_yaml_gliner_union,
)

gliner = pytest.importorskip("gliner")

SCORE_ATOL = 1e-4
WORD = re.compile(r"\w+(?:[-_]\w+)*|\S")
LETTERS = r"[^\W\d_]"
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004. John met "
    "Angela Merkel in Paris with Emmanuel Macron, and Smith stayed.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30! Jane works for Acme.",
    "Tim Cook met Satya Nadella",
    "",
]
LABELS = ["person", "location", "organization"]

deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner_union(tmp_path_factory.mktemp("union"))


@pytest.fixture(scope="module")
def members(folder: Path) -> list[tuple[Any, bool]]:
    """The reference models and whether each merges adjacent spans."""
    return [
        (gliner.GLiNER.from_pretrained(str(folder / FIRST), local_files_only=True), False),
        (gliner.GLiNER.from_pretrained(str(folder / SECOND), local_files_only=True), True),
    ]


def ours(folder: Path, texts: list[str], labels: list[str] | None, options: dict[str, Any]) -> Any:
    state, target, devices = in_process(model_yaml_gliner_union("tiny/union", folder), folder / FIRST)
    job = ExtractJob(texts=texts, labels=labels, options=options, items=[Item(text=t) for t in texts])
    extracted = asyncio.run(run_gliner_union(state, target, job))
    return extracted, devices


def reference(members: list[tuple[Any, bool]], text: str, labels: list[str], opts: UnionOptions) -> list[Any]:
    """SIE's recipe, written out plainly over the gliner package's own predictions."""
    words = [m.span() for m in WORD.finditer(text)]
    windows, first = [], 0
    while len(words) > opts.window_words:
        last = min(first + opts.window_words, len(words)) - 1
        windows.append((words[first][0], words[last][1]))
        if last == len(words) - 1:
            break
        first += opts.window_words - opts.window_overlap
    windows = windows or [(0, len(text))]
    best: dict[tuple[int, int, str], float] = {}
    for model, merges in members:
        for start, end in windows:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                found = (
                    model.predict_entities(text[start:end], labels, threshold=0.5) if text[start:end] else []
                )
            for e in merged(found) if merges else found:
                key = (e["start"] + start, e["end"] + start, e["label"])
                if e["score"] >= opts.score_floor and e["score"] > best.get(key, -1.0):
                    best[key] = e["score"]
    spans = sorted(best.items(), key=lambda kv: (kv[0][0], kv[0][1]))
    names: dict[str, float] = {}
    for (start, end, label), score in spans:
        if label == opts.propagate_label:
            for token in re.findall(f"{LETTERS}{{{opts.name_min_letters},}}", text[start:end]):
                names[token] = max(names.get(token, score), score)
    added = [
        ((m.start(), m.end(), opts.propagate_label), names[token])
        for token in sorted(names)
        for m in re.finditer(f"(?<!{LETTERS}){re.escape(token)}(?!{LETTERS})", text)
        if not any(s <= m.start() and m.end() <= e for (s, e, _), _ in spans)
    ]
    everything = sorted(spans + added, key=lambda kv: (kv[0][0], kv[0][1]))
    return [(s, e, label, text[s:e], score) for (s, e, label), score in everything]


def merged(entities: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Spans of one label that touch or sit one character apart, joined at the higher score."""
    out: list[dict[str, Any]] = []
    for e in sorted(entities, key=lambda e: e["start"]):
        if out and out[-1]["label"] == e["label"] and e["start"] <= out[-1]["end"] + 1:
            last = out[-1]
            out[-1] = {**last, "end": max(last["end"], e["end"]), "score": max(last["score"], e["score"])}
        else:
            out.append(e)
    return out


def assert_same(got: list[dict[str, Any]], want: list[Any]) -> None:
    assert [(e["start"], e["end"], e["label"], e["text"]) for e in got] == [w[:4] for w in want]
    np.testing.assert_allclose([e["score"] for e in got], [w[4] for w in want], atol=SCORE_ATOL)


@deterministic
@pytest.mark.parametrize(
    "options",
    [
        {},  # the profile's: windows of 12 words, floor 0.6, person names propagated
        {"score_floor": 0.5, "window_words": 7, "window_overlap": 2},
        {"window_words": 300, "propagate_label": None},  # each text whole, no propagation
    ],
)
def test_union_matches_the_members_predictions_composed(
    folder: Path, members: list[tuple[Any, bool]], options: dict[str, Any]
) -> None:
    extracted, devices = ours(folder, TEXTS, LABELS, options)
    opts = union_options({**model_yaml_runtime(), **options})  # a null propagate_label: none
    total = 0
    for text, got in zip(TEXTS, extracted.entities, strict=True):
        want = reference(members, text, LABELS, opts)
        assert_same(got, want)
        total += len(got)
    assert total >= 10  # not a comparison of empty lists
    # Each member read every window of every text, in batches of its own.
    assert sorted({batch.scalar for batch in devices.batches}) == [0.0, 1.0]
    assert extracted.input_tokens == sum(len(b.input_ids) for b in devices.batches)


def model_yaml_runtime() -> dict[str, Any]:
    return dict(
        model_yaml_gliner_union("x", Path("/nonexistent"))["profiles"]["default"]["adapter_options"][
            "runtime"
        ]
    )


@deterministic
def test_no_labels_takes_the_default_labels(folder: Path, members: list[tuple[Any, bool]]) -> None:
    extracted, _ = ours(folder, TEXTS[:1], None, {})
    opts = union_options(model_yaml_runtime())
    assert_same(extracted.entities[0], reference(members, TEXTS[0], DEFAULT_LABELS, opts))


@pytest.mark.parametrize(
    ("labels", "options", "fragment"),
    [
        (["person"], {"score_floor": 2}, "score_floor"),
        (["person"], {"window_words": 1}, "window_words"),
        (["person"], {"window_words": 10, "window_overlap": 10}, "window_overlap"),
        (["person"], {"name_min_letters": 0}, "name_min_letters"),
        (["person"], {"propagate_label": 3}, "propagate_label"),
        (["person"], {"default_labels": []}, "default_labels"),
        (["x" * 129], {}, "at most 128"),
        (["<<ENT>>"], {}, "marker"),
    ],
)
def test_bad_requests_are_400(
    folder: Path, labels: list[str], options: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        ours(folder, ["Tim Cook"], labels, options)


def test_without_labels_or_defaults_is_400(folder: Path) -> None:
    raw = model_yaml_gliner_union("tiny/union", folder)
    del raw["profiles"]["default"]["adapter_options"]["runtime"]["default_labels"]
    state, target, _ = in_process(raw, folder / FIRST)
    job = ExtractJob(texts=["Tim Cook"], labels=None, options={}, items=[Item(text="Tim Cook")])
    with pytest.raises(InvalidInput, match="needs labels"):
        asyncio.run(run_gliner_union(state, target, job))
