"""GLiNER relex prompts against the `gliner` package's own relex processor, and the request options."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.gliner import GlinerPrompts
from sie.frontend.gliner_relex import RelexOptions, decode_relations, relex_options
from tests.tiny_models.gliner_relex import make_gliner_relex

gliner = pytest.importorskip("gliner")

TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Hi",
    "",
    "word " * 60,  # past max_len
]
LABELS = ["person", "organization", "person"]  # a duplicate, as gliner takes it
RELATION_SETS = [[], ["works at"], ["works at", "lives in", "founded by"]]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliner_relex(tmp_path_factory.mktemp("relex"))


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    return gliner.GLiNER.from_pretrained(str(folder), local_files_only=True)


@pytest.mark.parametrize("relations", RELATION_SETS)
def test_prompt_ids_and_words_mask_match_gliner(folder: Path, reference: Any, relations: list[str]) -> None:
    prompts = GlinerPrompts.from_dir(folder)
    assert (
        prompts.settings.rel_token == "<<REL>>" and prompts.rel_token_id == reference.config.rel_token_index
    )
    encoded, words = prompts.encode(TEXTS, LABELS, relations)
    assert encoded.aux is not None
    for i, text in enumerate(TEXTS):
        prepared = reference.prepare_batch([text], LABELS, relations=relations)
        if not prepared["input_x"]:  # gliner drops an empty text; the prompt alone is sent here
            assert words[i] == []
            continue
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sentence of length")
            batch = reference.collate_batch(prepared["input_x"], prepared["entity_types"], None, relations)
        start, end = encoded.offsets[i], encoded.offsets[i + 1]
        np.testing.assert_array_equal(encoded.input_ids[start:end], batch["input_ids"][0].numpy())
        np.testing.assert_array_equal(encoded.aux[start:end], batch["words_mask"][0].numpy())
        assert len(words[i]) == int(batch["text_lengths"][0, 0])


def test_relation_markers_in_labels_are_rejected(folder: Path) -> None:
    with pytest.raises(InvalidInput, match="marker"):
        GlinerPrompts.from_dir(folder).encode(["text"], ["person"], ["<<REL>> x"])


def options(**given: Any) -> RelexOptions:
    return relex_options(given, ["person"], 0.5, None, 1000)


def test_options_defaults_and_overrides() -> None:
    assert options() == RelexOptions([], 0.5)  # no relation types: entities only; threshold as gliner
    assert relex_options({}, ["person"], 0.4, 0.7, 1000).relation_threshold == 0.7  # the profile's
    assert options(relation_labels=[" works at "], relation_threshold=0.9) == RelexOptions(["works at"], 0.9)


@pytest.mark.parametrize(
    ("given", "fragment"),
    [
        ({"relation_labels": "works at"}, "must be a list"),
        ({"relation_labels": ["works at", ""]}, "non-empty strings"),
        ({"relation_labels": ["works at", 3]}, "non-empty strings"),
        ({"relation_labels": ["a", " a"]}, "unique"),
        ({"relation_labels": [f"r{i}" for i in range(1000)]}, "at most 1000"),
        ({"relation_labels": ["x" * 129]}, "128 characters"),
        ({"relation_threshold": 1.5}, "relation_threshold"),
        ({"relation_threshold": True}, "relation_threshold"),
        ({"relation_threshold": float("nan")}, "relation_threshold"),
    ],
)
def test_bad_options_are_invalid_input(given: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidInput, match=fragment):
        options(**given)


def test_a_threshold_below_the_relex_minimum_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"at least 0\.1"):
        relex_options({}, ["person"], 0.05, None, 1000)


def test_relations_need_both_spans_among_the_entities() -> None:
    entities = [{"text": "Ann"}, {"text": "Bob"}]
    pairs = np.array(
        [
            [0, 0, 2, 3, 5.0, -5.0],  # Ann -> Bob: the first type only
            [2, 3, 0, 0, 5.0, 5.0],  # Bob -> Ann: both types
            [1, 1, 0, 0, 9.0, 9.0],  # a candidate that is no entity: dropped
        ],
        np.float32,
    )
    got = decode_relations(pairs, entities, [(0, 0), (2, 3)], ["knows", "likes"], 0.5)
    assert [(r["head"], r["tail"], r["relation"]) for r in got] == [
        ("Ann", "Bob", "knows"),
        ("Bob", "Ann", "knows"),
        ("Bob", "Ann", "likes"),
    ]
