"""GliformerAdapter + Runner + the frontend's decode against the `gliformer` package's inference."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.gliformer import GliformerPrompts, decode
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.gliformer import GliformerAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.gliformer import make_gliformer, model_yaml_gliformer

gliformer = pytest.importorskip("gliformer")

SCORE_ATOL = 1e-4
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "Hi",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
    "word " * 60,  # past max_len: the package's tokenizer cut keeps the first words
]
LABEL_SETS = [
    ["person", "location", "organization", "date"],
    ["city"],
    ["first name", "person", "first name"],
]
THRESHOLDS = [0.5, 0.3]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_gliformer(tmp_path_factory.mktemp("gliformer"))


@pytest.fixture(scope="module")
def reference(folder: Path) -> Any:
    return load_reference(folder)


def load_reference(folder: Path) -> Any:
    """The package's own model on the same folder (its marker-token notices silenced)."""
    import gliformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gliformer.GLiFormer.from_pretrained(str(folder), local_files_only=True, load_tokenizer=True)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> GliformerAdapter:
    config = parse_model_config(model_yaml_gliformer("tiny/gliformer", folder))
    loaded = load_adapter(config, folder, "cpu")
    assert isinstance(loaded, GliformerAdapter)
    return loaded


def run(adapter: GliformerAdapter, items: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    """Each item's TOKEN_SCORES rows (start, end, inside logits), from one batch of all the items."""
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0, aux=aux) for i, (ids, aux) in enumerate(items)]
    lengths = [len(ids) for ids, _ in items]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    scores = output[ResultKind.TOKEN_SCORES]
    assert scores.values.shape[1] == 3 and scores.row_offsets is not None
    offsets = scores.row_offsets
    return [scores.values[offsets[i] : offsets[i + 1]] for i in range(len(items))]


def served(
    adapter: GliformerAdapter, prompts: GliformerPrompts, labels: list[str], threshold: float
) -> list[Any]:
    encoded, words = prompts.encode(TEXTS, labels)
    assert encoded.aux is not None
    o = encoded.offsets
    items = [(encoded.input_ids[o[i] : o[i + 1]], encoded.aux[o[i] : o[i + 1]]) for i in range(len(TEXTS))]
    scores = run(adapter, items)
    return [decode(scores[i], labels, words[i], text, threshold) for i, text in enumerate(TEXTS)]


def expected(reference: Any, text: str, labels: list[str], threshold: float) -> list[dict[str, Any]]:
    # One text per call: the package decodes a batch over its padded width (see the frontend module).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return reference.inference([text], entities=list(dict.fromkeys(labels)), threshold=threshold)["ner"][
            0
        ]


@pytest.mark.parametrize("threshold", THRESHOLDS)
@pytest.mark.parametrize("labels", LABEL_SETS)
def test_entities_match_the_package(
    adapter: GliformerAdapter, reference: Any, folder: Path, labels: list[str], threshold: float
) -> None:
    prompts = GliformerPrompts.from_dir(folder)
    ours = served(adapter, prompts, labels, threshold)
    found = 0
    for text, got in zip(TEXTS, ours, strict=True):
        want = expected(reference, text, labels, threshold)
        assert [(e["start"], e["end"], e["text"], e["label"]) for e in got] == [
            (e["start"], e["end"], e["text"], e["label"]) for e in want
        ], text
        np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=SCORE_ATOL)
        found += len(got)
    assert found, "the tiny model found nothing: the comparison would be empty"


def test_the_prompt_is_the_packages(reference: Any, folder: Path) -> None:
    """Our ids and words_mask equal what the package's collator feeds its model."""
    captured: dict[str, Any] = {}
    forward = reference.model.forward

    def capture(*args: Any, **kwargs: Any) -> Any:
        captured.update(kwargs)
        return forward(*args, **kwargs)

    reference.model.forward = capture
    try:
        expected(reference, TEXTS[1], LABEL_SETS[0], 0.5)
    finally:
        del reference.model.forward
    encoded, _ = GliformerPrompts.from_dir(folder).encode([TEXTS[1]], LABEL_SETS[0])
    assert encoded.input_ids.tolist() == captured["input_ids"][0].tolist()
    assert encoded.aux is not None and encoded.aux.tolist() == captured["words_mask"][0].tolist()


def test_encode_matches_embed_text(adapter: GliformerAdapter, reference: Any, folder: Path) -> None:
    """DENSE rows from the plain text tokens equal the package's embed_text (unnormalized)."""
    tokenizer = reference.data_processor.transformer_tokenizer
    texts = TEXTS[:4]
    items = [(np.asarray(ids, np.int32), None) for ids in tokenizer(texts, truncation=True)["input_ids"]]
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0) for i, (ids, _) in enumerate(items)]
    lengths = [len(ids) for ids, _ in items]
    key = GroupKey(0, int(Op.ENCODE), mask_of({ResultKind.DENSE}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = reference.embed_text(texts, batch_size=1).numpy()
    np.testing.assert_allclose(output[ResultKind.DENSE].values, want, atol=1e-4)
