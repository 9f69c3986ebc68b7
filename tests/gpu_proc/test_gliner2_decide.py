"""GLiNER2.5-Decide: the frontend's rows (sie/frontend/gliner2_decide.py) through Gliner2DecideAdapter
and the Runner, against gliner2 2.x's own classification scorer on the same tiny random weights,
for span and boundary checkpoints."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InputTooLong
from sie.frontend.gliner2 import Gliner2Prompts, model_text, split_words
from sie.frontend.gliner2_decide import MAX_CHARS_PER_TOKEN, MAX_WORD_CHARS, DecideRows
from sie.frontend.gliner2_decisions import Decisions
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.gliner2_decide import Gliner2DecideAdapter
from sie.model_config import parse_model_config
from tests.frontend.test_gliner2_decisions import parse
from tests.gpu_proc.test_gliner2_adapter import forward_rows
from tests.tiny_models.gliner2 import (
    make_gliner2_decide,
    make_gliner2_decide_boundary,
    model_yaml_gliner2_decide,
)

gliner2 = pytest.importorskip("gliner2")
if int(gliner2.__version__.split(".")[0]) < 2:
    pytest.skip("GLiNER2.5-Decide needs gliner2 2.x", allow_module_level=True)

WINDOW = 160
MAX_PROMPT_TOKENS = 120
TEXTS = [
    "I am so happy today, the sun is shining and the tickets are booked!",
    "Help! The server is down and customers cannot log in.",
    "ok",
    "Zoe\u0308 Mu\u0308ller flew from \u0130stanbul to Krak\u00f3w with Ann\u200dMarie",
    "Hello \x07 Paris \ufeffBOM\u200b Lyon",  # words the tokenizer reads as nothing
]
QUESTIONS = {
    "mood": {
        "type": "choice",
        "instructions": "How does the writer feel?",
        "criteria": {"happy": "glad, cheerful", "sad": None, "angry": {"level": 3, "signs": ["caps"]}},
    },
    "urgent": {"type": "noul", "instructions": "Is it urgent?", "criteria": {"true": "needs action today"}},
    "quality": {"type": "score", "instructions": "Rate the writing", "criteria": ["poor", "1", "excellent"]},
    "agree": {"type": "noul", "instructions": "Agrees?", "labels": {"false": "disagree", "true": "agree"}},
}
REQUESTS: dict[str, dict[str, Any]] = {
    "questions": {"output_schema": QUESTIONS},
    "groups": {
        "instruction": "Tag the support ticket",
        "options": {"label_groups": {"topic": ["billing", "outage", "login"], "tone": ["calm", "upset"]}},
    },
    "multi_labels": {
        "labels": ["travel", "weather", "Work Stuff"],
        "options": {"multi_label": True, "classification_task": "topics"},
    },
}
BUILDERS = {"span": make_gliner2_decide, "boundary": make_gliner2_decide_boundary}


@pytest.fixture(scope="module", params=list(BUILDERS))
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return BUILDERS[request.param](tmp_path_factory.mktemp(f"decide-{request.param}"))


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    """gliner2's classification scorer on the saved weights (float32, CPU, eval)."""
    from gliner2 import AutoExtractor
    from gliner2.classification.scoring import ClassificationScorer

    return ClassificationScorer(AutoExtractor.from_pretrained(str(folder), map_location="cpu").eval())


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Gliner2DecideAdapter:
    loaded = load_adapter(parse_model_config(model_yaml_gliner2_decide("tiny/decide", folder)), folder, "cpu")
    assert isinstance(loaded, Gliner2DecideAdapter)
    return loaded


@pytest.fixture(scope="module")
def rows(folder: Path) -> DecideRows:
    return DecideRows(Gliner2Prompts.from_dir(folder, None), WINDOW, MAX_PROMPT_TOKENS)


# A task as gliner2's classification schema takes it: name, label -> description, prompt, multi-label.
PackageTask = tuple[str, dict[str, str | None], str | None, bool]


def package_schema(tasks: Sequence[PackageTask]) -> Any:
    """gliner2's own compiled classification schema of these tasks."""
    from gliner2.classification import ClassificationSchema
    from gliner2.classification.compiler import compile_schema

    schema = ClassificationSchema()
    for name, labels, prompt, multi_label in tasks:
        (schema.multi if multi_label else schema.single)(name, labels, instruction=prompt)
    return compile_schema(schema)


def package_tasks(decisions: Decisions) -> list[PackageTask]:
    """The same tasks as the request's: labels with their descriptions."""
    return [
        (task.name, dict(zip(task.labels, task.descriptions, strict=True)), task.prompt, task.multi_label)
        for task in decisions.tasks
    ]


def package_logits(reference: Any, decisions: Decisions, texts: list[str], max_len: int | None = None) -> Any:
    scores = reference.batch_score(
        texts, package_schema(package_tasks(decisions)), batch_size=len(texts), max_len=max_len
    )
    return [np.array([s.tasks[t.name][label] for t in decisions.tasks for label in t.labels]) for s in scores]


def served_logits(
    adapter: Gliner2DecideAdapter, rows: DecideRows, requests: list[tuple[Decisions, list[str]]]
) -> Any:
    """Every request's rows through the adapter in one batch: each request's per-item logits."""
    encodings = []
    for decisions, texts in requests:
        prefix = rows.prefix(decisions)
        room = rows.window - len(prefix.ids)
        encodings.append(rows.encode(prefix, [rows.document(t, room, from_end=False) for t in texts]))
    flat = [values.reshape(-1) for values in forward_rows(adapter, encodings)]
    out, start = [], 0
    for _, texts in requests:
        out.append(flat[start : start + len(texts)])
        start += len(texts)
    return out


@pytest.mark.usefixtures("deterministic_torch")
def test_every_requests_labels_score_as_gliner2_scores_them_in_one_batch(
    adapter: Gliner2DecideAdapter, rows: DecideRows, reference: Any
) -> None:
    requests = [(parse(params), TEXTS) for params in REQUESTS.values()]
    for (decisions, texts), ours in zip(requests, served_logits(adapter, rows, requests), strict=True):
        theirs = package_logits(reference, decisions, texts)
        for o, t in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(o, t, atol=1e-5)
            assert np.ptp(t) > 0.1  # the labels differ: a swapped label would show


def test_descriptions_and_prompts_change_the_scores(adapter: Gliner2DecideAdapter, rows: DecideRows) -> None:
    plain = {"mood": {"type": "choice", "instructions": "", "criteria": ["happy", "sad", "angry"]}}
    described, bare = served_logits(
        adapter,
        rows,
        [
            (parse({"output_schema": QUESTIONS}), TEXTS[:1]),
            (parse({"output_schema": plain}), TEXTS[:1]),
        ],
    )
    assert not np.allclose(described[0][:3], bare[0])


def fitting_words(reference: Any, decisions: Decisions, text: str) -> int:
    """Independently of our rows: the most words of `text` gliner2's own collated row holds within
    the window (its max_len counts words)."""
    processor = reference.processor
    schema = package_schema(package_tasks(decisions)).build()
    n_words = len(split_words(model_text(text))[0])
    fits = 0
    for k in range(1, n_words + 1):
        batch = processor.collate_fn_inference([(text, schema)], max_len=k)
        if batch.input_ids.shape[1] > WINDOW:
            break
        fits = k
    return fits


@pytest.mark.usefixtures("deterministic_torch")
def test_a_long_text_is_read_as_the_whole_words_that_fit(
    adapter: Gliner2DecideAdapter, rows: DecideRows, reference: Any
) -> None:
    decisions = parse(REQUESTS["groups"])
    text = " ".join(f"Ticket{i} says the login page fails again" for i in range(600))
    assert len(text) > WINDOW * MAX_CHARS_PER_TOKEN + MAX_WORD_CHARS  # cut before it is split
    k = fitting_words(reference, decisions, text)
    prefix = rows.prefix(decisions)
    document = rows.document(text, WINDOW - len(prefix.ids), from_end=False)
    assert not document.complete and 0 < k < len(split_words(text)[0])
    assert len(prefix.ids) + len(document.ids) <= WINDOW
    (ours,) = served_logits(adapter, rows, [(decisions, [text])])
    (theirs,) = package_logits(reference, decisions, [text], max_len=k)
    np.testing.assert_allclose(ours[0], theirs, atol=1e-5)


@pytest.mark.usefixtures("deterministic_torch")
def test_turns_are_read_from_their_end(
    adapter: Gliner2DecideAdapter, rows: DecideRows, reference: Any
) -> None:
    decisions = parse({"output_schema": QUESTIONS})
    turns = [{"role": "user", "content": f"message {i}: the invoice total looks wrong"} for i in range(600)]
    text = json.dumps(turns, ensure_ascii=False)
    assert len(text) > WINDOW * MAX_CHARS_PER_TOKEN + MAX_WORD_CHARS  # cut before it is split
    prefix = rows.prefix(decisions)
    document = rows.document(text, WINDOW - len(prefix.ids), from_end=True)
    assert not document.complete
    # The kept words are the text's last ones: gliner2 reading the text from the first kept word on
    # (a suffix at a word's start splits into the same words) builds the same row.
    seen = model_text(text)
    words, spans = split_words(seen)
    encoded = rows.encode(prefix, [document])
    from_here = np.cumsum([len(rows.prompts.pieces(w)) for w in reversed(words)])[
        ::-1
    ]  # tokens from word i on
    first = int(np.argmax(from_here <= len(document.ids)))
    assert from_here[first] == len(document.ids) and from_here[first - 1] > len(document.ids)
    ours = forward_rows(adapter, [encoded])[0].reshape(-1)
    (theirs,) = package_logits(reference, decisions, [seen[spans[first][0] :]])
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_a_prompt_past_its_bound_is_too_long(rows: DecideRows) -> None:
    many = {f"question {i}": {"type": "noul", "instructions": "Does it hold?"} for i in range(20)}
    with pytest.raises(InputTooLong, match=f"at most {MAX_PROMPT_TOKENS}"):
        rows.prefix(parse({"output_schema": many}))


def test_only_label_markers_are_marked(rows: DecideRows) -> None:
    decisions = parse({"output_schema": QUESTIONS})
    prefix = rows.prefix(decisions)
    marked = prefix.ids[prefix.aux < 0]
    (label_id,) = rows.prompts.pieces("[L]")
    assert (marked == label_id).all() and len(marked) == sum(len(t.labels) for t in decisions.tasks)
