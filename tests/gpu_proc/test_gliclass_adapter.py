"""GliclassAdapter + Runner + the frontend's prompts and scores against the `gliclass` pipeline."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.gliclass import GliclassPrompts, ranked_classes
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.gliclass import GliclassAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.gliclass import LAYOUTS, make_gliclass, model_yaml_gliclass, pipeline

gliclass = pytest.importorskip("gliclass")

ATOL = 1e-4  # scores, fp32 on CPU
TEXTS = [
    "the app crashes on startup when config file is missing",
    "Charged twice for one order!",
    "hi",
    "Stocks fell sharply after the report, and the team won last night.",
    "",
    "the team won the championship last night " * 12,  # past the window: labels-first models cut it
]
LABEL_SETS = [["billing", "bug report", "feature request", "sports"], ["sports", "finance"], ["travel"]]
# Models whose pooling reads padding: the pipeline's scores depend on its batch, so the reference
# runs one text at a time (what the adapter computes for every item).
ALONE = {"padding-bound"}

deterministic = pytest.mark.usefixtures("deterministic_torch")


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


def config_of(folder: Path) -> Any:
    return parse_model_config(model_yaml_gliclass("tiny/gliclass", folder))


def load(folder: Path) -> GliclassAdapter:
    adapter = load_adapter(config_of(folder), folder, "cpu")
    assert isinstance(adapter, GliclassAdapter)
    return adapter


def run(adapter: GliclassAdapter, items: list[np.ndarray]) -> list[np.ndarray]:
    """Each item's label logits, from one batch of all the items."""
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0) for i, ids in enumerate(items)]
    lengths = [len(ids) for ids in items]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device("cpu")).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    scores = output[ResultKind.TOKEN_SCORES]
    assert (
        scores.values.dtype == np.float32 and scores.values.shape[1] == 1 and scores.row_offsets is not None
    )
    offsets = scores.row_offsets
    return [scores.values[offsets[i] : offsets[i + 1], 0] for i in range(len(items))]


def encode(
    folder: Path, texts: list[str], labels: list[str], instruction: str | None = None
) -> list[np.ndarray]:
    encoded = GliclassPrompts.for_model(config_of(folder)).encode(texts, labels, instruction)
    return [encoded.input_ids[s:e] for s, e in zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True)]


def reference_scores(
    reference: Any, texts: list[str], labels: list[str], *, multi_label: bool, alone: bool, **kwargs: Any
) -> list[dict[str, float]]:
    """Every label's score per text, as the pipeline computes it (`return_hierarchical` lists them all)."""
    kind = "multi-label" if multi_label else "single-label"
    return [
        dict(scores)
        for scores in reference(
            texts,
            labels,
            threshold=0.0,
            classification_type=kind,
            return_hierarchical=True,
            batch_size=1 if alone else 8,
            **kwargs,
        )
    ]


def assert_scores(got: list[dict[str, Any]], want: dict[str, float]) -> None:
    assert [c["label"] for c in got] == sorted(want, key=lambda label: -want[label])
    np.testing.assert_allclose([c["score"] for c in got], [want[c["label"]] for c in got], atol=ATOL)


def fits(layout: str, text: str) -> bool:
    """Whether the pipeline keeps every label of the text (a text-first model's long text pushes them out)."""
    return LAYOUTS[layout]["prompt_first"] or len(text) < 200


@deterministic
@pytest.mark.parametrize("multi_label", [False, True])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_scores_match_the_pipeline(
    folders: dict[str, Path], references: dict[str, Any], layout: str, multi_label: bool
) -> None:
    texts = [t for t in TEXTS if fits(layout, t)]
    labels = LABEL_SETS[0]
    logits = run(load(folders[layout]), encode(folders[layout], texts, labels))
    want = reference_scores(references[layout], texts, labels, multi_label=multi_label, alone=layout in ALONE)
    for i in range(len(texts)):
        assert_scores(ranked_classes(logits[i], labels, multi_label=multi_label, threshold=0.0), want[i])
    spread = [max(w.values()) - min(w.values()) for w in want]
    assert max(spread) > 0.1  # the labels' scores differ: the comparison checks which label is which


@deterministic
@pytest.mark.parametrize("layout", ["deberta", "text-first"])
def test_instruction_is_the_pipelines_prompt(
    folders: dict[str, Path], references: dict[str, Any], layout: str
) -> None:
    instruction, labels, texts = "classify the ticket", LABEL_SETS[0], TEXTS[:3]
    logits = run(load(folders[layout]), encode(folders[layout], texts, labels, instruction))
    want = reference_scores(
        references[layout], texts, labels, multi_label=False, alone=False, prompt=instruction
    )
    for i in range(len(texts)):
        assert_scores(ranked_classes(logits[i], labels, multi_label=False, threshold=0.0), want[i])


@deterministic
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_label_sets_differ_per_item_in_one_run(
    folders: dict[str, Path], references: dict[str, Any], layout: str
) -> None:
    # Requests with different labels share device batches: each item keeps to its own label slots.
    jobs = [(text, labels) for text in TEXTS[:4] for labels in LABEL_SETS]
    items = [encode(folders[layout], [text], labels)[0] for text, labels in jobs]
    logits = run(load(folders[layout]), items)
    for (text, labels), row in zip(jobs, logits, strict=True):
        (want,) = reference_scores(references[layout], [text], labels, multi_label=True, alone=True)
        assert_scores(ranked_classes(row, labels, multi_label=True, threshold=0.0), want)


@deterministic
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_batch_equals_single(folders: dict[str, Path], layout: str) -> None:
    adapter = load(folders[layout])
    items = encode(folders[layout], TEXTS, LABEL_SETS[0])
    batched = run(adapter, [*items, items[0]])
    for i, item in enumerate(items):
        (alone,) = run(adapter, [item])
        np.testing.assert_allclose(batched[i], alone, atol=1e-5)
    np.testing.assert_allclose(batched[-1], batched[0], atol=1e-5)


def test_padding_bound_layout_would_depend_on_the_batch(
    folders: dict[str, Path], references: dict[str, Any]
) -> None:
    # Why the adapter runs such items alone: the pipeline's own scores move with their batch mates.
    texts, labels = TEXTS[:4], LABEL_SETS[0]
    batched = reference_scores(references["padding-bound"], texts, labels, multi_label=True, alone=False)
    alone = reference_scores(references["padding-bound"], texts, labels, multi_label=True, alone=True)
    assert max(abs(batched[1][label] - alone[1][label]) for label in labels) > 1e-3


@deterministic
def test_a_single_label_request_with_one_label_scores_its_sigmoid(
    folders: dict[str, Path], references: dict[str, Any]
) -> None:
    # SIE's choice: the pipeline's softmax over one label would be 1.0 for any text.
    texts, labels = TEXTS[:3], ["sports"]
    logits = run(load(folders["deberta"]), encode(folders["deberta"], texts, labels))
    want = reference_scores(references["deberta"], texts, labels, multi_label=True, alone=False)
    for row, scores in zip(logits, want, strict=True):
        (got,) = ranked_classes(row, labels, multi_label=False, threshold=0.0)
        assert got["score"] == pytest.approx(scores["sports"], abs=ATOL) and got["score"] < 0.999


@deterministic
def test_long_text_first_item_scores_the_cut_text_with_every_label(folders: dict[str, Path]) -> None:
    from gliclass import GLiClassModel

    folder, labels = folders["text-first"], LABEL_SETS[0]
    (ids,) = encode(folder, [TEXTS[-1]], labels)
    (got,) = run(load(folder), [ids])
    model = GLiClassModel.from_pretrained(str(folder), local_files_only=True).eval()
    with torch.inference_mode():
        tensor = torch.from_numpy(ids.astype(np.int64))[None]
        want = model(
            input_ids=tensor, attention_mask=torch.ones_like(tensor), max_num_classes=len(labels)
        ).logits
    np.testing.assert_allclose(got, want[0].numpy(), atol=1e-5)


def test_only_uni_encoder_models_load(folders: dict[str, Path]) -> None:
    from gliclass import GLiClassModel

    model = GLiClassModel.from_pretrained(str(folders["deberta"]), local_files_only=True)
    model.config.architecture_type = "bi-encoder"
    with pytest.raises(ValueError, match="only uni-encoder"):
        GliclassAdapter(model, name="tiny")


def test_close_drops_the_weights(folders: dict[str, Path]) -> None:
    adapter = load(folders["deberta"])
    assert adapter.memory_bytes() > 0
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        run(adapter, encode(folders["deberta"], ["hi"], ["sports"]))
