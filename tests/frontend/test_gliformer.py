"""The GLiFormer frontend half: span decoding against the package's SpanDecoder, and refused input."""

from __future__ import annotations

import re

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.gliformer import GliformerPrompts, GliformerSettings, decode
from tests.tiny_models.gliformer import make_gliformer

span_decoder = pytest.importorskip("gliformer.tasks.span_decoder")
torch = pytest.importorskip("torch")

TEXT = "Ada Lovelace met Charles Babbage in London in 1833 to talk about engines"
LABELS = ["person", "city", "year"]


@pytest.fixture(scope="module")
def prompts(tmp_path_factory: pytest.TempPathFactory) -> GliformerPrompts:
    return GliformerPrompts.from_dir(make_gliformer(tmp_path_factory.mktemp("gliformer")))


def reference_spans(logits: np.ndarray, threshold: float, flat_ner: bool, multi_label: bool) -> list[tuple]:
    decoder = span_decoder.SpanDecoder.__new__(span_decoder.SpanDecoder)
    names = {i: label for i, label in enumerate(LABELS)}
    spans = decoder.decode_bio_spans(torch.from_numpy(logits), names, threshold, flat_ner, multi_label)
    return [(s.start, s.end, s.entity_type, s.score) for s in spans]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("flat_ner", "multi_label"), [(True, False), (False, False), (True, True)])
@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_decode_matches_the_package(seed: int, flat_ner: bool, multi_label: bool, threshold: float) -> None:
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", TEXT)]
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, 2.0, (len(words), len(LABELS), 3)).astype(np.float32)
    logits[..., 2] += 1.5  # "inside" mostly high, so multi-word spans occur
    got = decode(logits.reshape(-1, 3), LABELS, words, TEXT, threshold, flat_ner, multi_label)
    want = reference_spans(logits, threshold, flat_ner, multi_label)
    assert [(e["start"], e["end"], e["label"]) for e in got] == [
        (words[s][0], words[e][1], label) for s, e, label, _ in want
    ]
    np.testing.assert_allclose([e["score"] for e in got], [w[3] for w in want], atol=1e-6)


def test_bad_input_is_refused(prompts: GliformerPrompts) -> None:
    with pytest.raises(InvalidInput, match="non-blank"):
        prompts.encode(["   "], LABELS)
    with pytest.raises(InvalidInput, match="non-empty"):
        prompts.encode([TEXT], ["person", " "])
    with pytest.raises(InvalidInput, match="marker"):
        prompts.encode([TEXT], ["[ENTITY] person"])
    with pytest.raises(InvalidInput, match="maximum input length"):
        prompts.encode([TEXT], [f"label{i}" for i in range(30)])


def test_words_past_the_cut_are_dropped(prompts: GliformerPrompts) -> None:
    encoded, words = prompts.encode(["word " * 100], ["person"])
    assert encoded.aux is not None and 0 < len(words[0]) == int(encoded.aux.max()) < 100


@pytest.mark.parametrize(
    ("raw", "parent"),
    [
        ({}, "[SCHEMA]"),
        ({"parent_token": "[P]"}, "[P]"),
        ({"per_task_parents": True}, "[ENTITY_SCHEMA]"),
        ({"per_task_parents": True, "ner_parent_token": "[NER]"}, "[NER]"),
    ],
)
def test_the_prompt_opens_with_the_entity_tasks_parent(raw: dict, parent: str) -> None:
    """The same parent token the package's config resolves for its NER processor."""
    config = pytest.importorskip("gliformer").GLiFormerConfig(**raw)
    assert GliformerSettings.from_config(raw).parent_token == config.ner_parent_token == parent
