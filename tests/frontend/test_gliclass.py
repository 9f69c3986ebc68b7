"""GLiClass prompts and scores against the `gliclass` package's own pipeline and post-processing."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.gliclass import (
    MAX_INSTRUCTION_CHARS,
    GliclassPrompts,
    checked_instruction,
    checked_labels,
    is_multi_label,
    ranked_classes,
)
from sie.model_config import parse_model_config
from tests.tiny_models.gliclass import MAX_SEQUENCE_LENGTH, make_gliclass, model_yaml_gliclass, pipeline

gliclass = pytest.importorskip("gliclass")

LAYOUTS = ["deberta", "text-first", "modernbert"]  # labels first and text first; Unigram and WordPiece
TEXTS = [
    "the app crashes on startup when config file is missing",
    "Charged twice for one order!",
    "hi",
    "",
    "tabs\tand\nnew lines   and  spaces  ",
]
LONG_TEXT = "the team won the championship last night " * 12  # past the 64-token window
VERY_LONG_TEXT = "stocks fell sharply after the report " * 120  # past the characters tokenized in full
LABELS = ["billing", "bug report", "feature request", "sports"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        layout: make_gliclass(tmp_path_factory.mktemp(f"gliclass-{layout}"), layout) for layout in LAYOUTS
    }


@pytest.fixture(scope="module")
def references(folders: dict[str, Path]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {layout: pipeline(folder) for layout, folder in folders.items()}


def prompts_of(folder: Path) -> GliclassPrompts:
    return GliclassPrompts.for_model(parse_model_config(model_yaml_gliclass("tiny/gliclass", folder)))


def rows(
    prompts: GliclassPrompts, texts: list[str], labels: list[str], instruction: str | None = None
) -> list:
    encoded = prompts.encode(texts, labels, instruction)
    return [
        encoded.input_ids[s:e].tolist()
        for s, e in zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True)
    ]


def pipeline_rows(
    reference: Any, texts: list[str], labels: list[str], instruction: str | None = None
) -> list:
    """The pipeline's own token ids, one text at a time (no padding)."""
    return [
        reference.pipe.prepare_inputs([text], labels, same_labels=True, prompt=instruction)["input_ids"][
            0
        ].tolist()
        for text in texts
    ]


@pytest.mark.parametrize("instruction", [None, "classify the ticket"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_token_ids_are_the_pipelines(
    folders: dict[str, Path], references: dict[str, Any], layout: str, instruction: str | None
) -> None:
    got = rows(prompts_of(folders[layout]), TEXTS, LABELS, instruction)
    assert got == pipeline_rows(references[layout], TEXTS, LABELS, instruction)
    for labels in (["sports"], LABELS[::-1]):
        assert rows(prompts_of(folders[layout]), TEXTS[:2], labels) == pipeline_rows(
            references[layout], TEXTS[:2], labels
        )


@pytest.mark.parametrize("layout", ["deberta", "modernbert"])
def test_labels_first_long_text_is_cut_as_the_pipeline_cuts_it(
    folders: dict[str, Path], references: dict[str, Any], layout: str
) -> None:
    got = rows(prompts_of(folders[layout]), [LONG_TEXT, VERY_LONG_TEXT], LABELS)
    assert got == pipeline_rows(references[layout], [LONG_TEXT, VERY_LONG_TEXT], LABELS)
    assert [len(row) for row in got] == [MAX_SEQUENCE_LENGTH] * 2


def test_text_first_long_text_is_cut_to_keep_every_label(
    folders: dict[str, Path], references: dict[str, Any]
) -> None:
    # The pipeline would cut the labels off; here the text is cut to the room they leave.
    tokenizer = references["text-first"].pipe.tokenizer
    prompt = "".join(f"<<LABEL>>{label}" for label in LABELS) + "<<SEP>>"
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    room = MAX_SEQUENCE_LENGTH - 2 - len(prompt_ids)

    got = rows(prompts_of(folders["text-first"]), [LONG_TEXT, TEXTS[0], VERY_LONG_TEXT], LABELS)

    for row, text in ((got[0], LONG_TEXT), (got[2], VERY_LONG_TEXT)):
        text_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert row == [tokenizer.cls_token_id, *text_ids[:room], *prompt_ids, tokenizer.sep_token_id]
        assert len(row) == MAX_SEQUENCE_LENGTH
    assert got[1] == pipeline_rows(references["text-first"], [TEXTS[0]], LABELS)[0]


def test_labels_that_leave_no_room_are_refused(folders: dict[str, Path]) -> None:
    prompts = prompts_of(folders["deberta"])
    many = [f"label number {i}" for i in range(40)]
    with pytest.raises(InvalidInput, match="no room for the text"):
        prompts.encode(["hi"], many)
    with pytest.raises(InvalidInput, match="no room for the text"):
        prompts.encode(["hi"], ["x" * 5000])  # refused before tokenizing
    with pytest.raises(InvalidInput, match="no room for the text"):
        prompts.encode(["hi"], LABELS, "classify " * 60)


@pytest.mark.parametrize("text", ["spam <<LABEL>> eggs", "a <<SEP>> b", "<<EXAMPLE>>"])
def test_texts_with_marker_tokens_are_refused(folders: dict[str, Path], text: str) -> None:
    with pytest.raises(InvalidInput, match="Item 1's text must not contain"):
        prompts_of(folders["deberta"]).encode(["fine", text], LABELS)


def test_labels_are_stripped_unique_and_free_of_markers() -> None:
    assert checked_labels(["  billing ", "bug report"]) == ["billing", "bug report"]
    with pytest.raises(InvalidInput, match="unique"):
        checked_labels(["billing", " billing"])
    with pytest.raises(InvalidInput, match="non-empty"):
        checked_labels(["billing", "  "])
    with pytest.raises(InvalidInput, match="marker"):
        checked_labels(["a<<LABEL>>b"])


def test_instruction_and_options() -> None:
    assert checked_instruction(None) is None and checked_instruction("  ") is None
    assert checked_instruction("classify it") == "classify it"
    with pytest.raises(InvalidInput, match="at most"):
        checked_instruction("x" * (MAX_INSTRUCTION_CHARS + 1))
    assert is_multi_label({}, False) is False and is_multi_label({}, True) is True
    assert is_multi_label({"classification_type": "multi-label"}, False) is True
    assert is_multi_label({"classification_type": "single-label"}, True) is False
    for bad in ({"classification_type": "multi"}, {"label_groups": {"a": ["b"]}}, {"examples": []}):
        with pytest.raises(InvalidInput):
            is_multi_label(bad, False)


@pytest.mark.parametrize("multi_label", [False, True])
def test_scores_are_the_pipelines_post_processing(multi_label: bool) -> None:
    import torch

    postprocess = gliclass.pipeline.BaseZeroShotClassificationPipeline._postprocess_logits
    kind = "multi-label" if multi_label else "single-label"
    rng = np.random.default_rng(0)
    for logits in (rng.normal(0, 3, 5).astype(np.float32), np.array([30.0, -30.0, 0.5, 0.5], np.float32)):
        labels = [f"l{i}" for i in range(len(logits))]
        _, want = postprocess(torch.from_numpy(logits), labels, kind, 0.0)
        got = ranked_classes(logits, labels, multi_label=multi_label, threshold=0.0)
        assert [c["label"] for c in got] == sorted(labels, key=lambda label: -want[label])  # stable on ties
        np.testing.assert_allclose([c["score"] for c in got], [want[c["label"]] for c in got], atol=1e-6)


def test_threshold_drops_lower_scores_and_one_label_gets_its_sigmoid() -> None:
    logits = np.array([2.0, -1.0, 0.0], np.float32)
    got = ranked_classes(logits, ["a", "b", "c"], multi_label=True, threshold=0.5)
    assert [c["label"] for c in got] == ["a", "c"]  # sigmoid(0) = 0.5 is kept: at or above
    (alone,) = ranked_classes(np.array([2.0], np.float32), ["a"], multi_label=False, threshold=0.0)
    assert alone["score"] == pytest.approx(1 / (1 + np.exp(-2.0)))
    (huge,) = ranked_classes(np.array([-1000.0], np.float32), ["a"], multi_label=True, threshold=0.0)
    assert huge["score"] == 0.0
