"""GlinerAdapter + Runner + the frontend's decode against the `gliner` package's predict_entities."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.gliner import GlinerPrompts, decode
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.gliner import GlinerAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.gliner import MAX_WIDTH, make_gliner, model_yaml_gliner

gliner = pytest.importorskip("gliner")

ARCHS = ["bert", "deberta"]
ATOL = 1e-5  # logits, fp32 on CPU
SCORE_ATOL = 1e-4
TEXTS = [
    "John Smith lives in New York and works at Springfield Elementary School since 2004.",
    "Dr. Jane O'Neil-Watts met María Gómez in São Paulo on 3/4/2021 at 10:30!",
    "Hi",
    "Angela Merkel visited Paris, Berlin and Tokyo last week with Emmanuel Macron.",
    "word " * 60,  # past max_len: gliner keeps the first 40 words
    "",
]
LABEL_SETS = [
    ["person", "location", "organization", "date"],
    ["city"],
    ["first name", "person", "first name"],
]

# Not module-wide: deterministic algorithms on CUDA would also need a cuBLAS workspace setting.
deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {arch: make_gliner(tmp_path_factory.mktemp(f"gliner-{arch}"), arch=arch) for arch in ARCHS}


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, Any]:
    return {arch: gliner.GLiNER.from_pretrained(str(f), local_files_only=True) for arch, f in folders.items()}


def load(folders: dict[str, Path], arch: str) -> GlinerAdapter:
    config = parse_model_config(model_yaml_gliner(f"tiny/gliner-{arch}", folders[arch]))
    adapter = load_adapter(config, folders[arch], "cpu")
    assert isinstance(adapter, GlinerAdapter)
    return adapter


def run(
    adapter: GlinerAdapter, items: list[tuple[np.ndarray, np.ndarray]], device: str = "cpu"
) -> list[np.ndarray]:
    """Each item's TOKEN_SCORES rows (one logit each), from one batch of all the items."""
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0, aux=aux) for i, (ids, aux) in enumerate(items)]
    lengths = [len(ids) for ids, _ in items]
    key = GroupKey(0, int(Op.EXTRACT), mask_of({ResultKind.TOKEN_SCORES}), 0, 0)
    output = Runner(torch.device(device)).run(adapter, Batch(key, pending, sum(lengths), max(lengths), 0.0))
    scores = output[ResultKind.TOKEN_SCORES]
    assert (
        scores.values.dtype == np.float32 and scores.values.shape[1] == 1 and scores.row_offsets is not None
    )
    offsets = scores.row_offsets
    return [scores.values[offsets[i] : offsets[i + 1], 0] for i in range(len(items))]


def encode(prompts: GlinerPrompts, texts: list[str], labels: list[str]) -> tuple[list[Any], list[Any]]:
    encoded, words = prompts.encode(texts, labels)
    assert encoded.aux is not None
    bounds = list(zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True))
    return [(encoded.input_ids[s:e], encoded.aux[s:e]) for s, e in bounds], words


def reference_entities(model: Any, text: str, labels: list[str], threshold: float) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sentence of length")  # gliner's max_len cut
        entities: list[dict[str, Any]] = model.predict_entities(text, labels, threshold=threshold)
    return entities


def assert_same_entities(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    keys = ("start", "end", "text", "label")
    assert [tuple(e[k] for k in keys) for e in got] == [tuple(e[k] for k in keys) for e in want]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=SCORE_ATOL)
    assert all(e["bbox"] is None for e in got)


@deterministic
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_gliner_forward(folders: dict[str, Path], models: dict[str, Any], arch: str) -> None:
    adapter, model = load(folders, arch), models[arch]
    labels = LABEL_SETS[0]
    items, words = encode(GlinerPrompts.from_dir(folders[arch]), TEXTS[:-1], labels)
    for i, rows in enumerate(run(adapter, items)):
        prepared = model.prepare_batch([TEXTS[i]], labels)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sentence of length")
            batch = model.collate_batch(prepared["input_x"], prepared["entity_types"])
        want = model.run_batch(batch).logits[0].numpy()  # [words, max_width, labels]
        assert want.shape == (len(words[i]), MAX_WIDTH, len(labels))
        np.testing.assert_allclose(rows, want.reshape(-1), atol=ATOL)


@deterministic
@pytest.mark.parametrize("threshold", [0.5, 0.8])
@pytest.mark.parametrize("labels", LABEL_SETS)
@pytest.mark.parametrize("arch", ARCHS)
def test_entities_match_predict_entities(
    folders: dict[str, Path], models: dict[str, Any], arch: str, labels: list[str], threshold: float
) -> None:
    prompts = GlinerPrompts.from_dir(folders[arch])
    items, words = encode(prompts, TEXTS, labels)
    found = 0
    for i, rows in enumerate(run(load(folders, arch), items)):
        got = decode(rows, len(words[i]), labels, words[i], TEXTS[i], threshold)
        assert_same_entities(got, reference_entities(models[arch], TEXTS[i], labels, threshold))
        found += len(got)
    assert found >= 3  # the comparison is not between two empty lists


@deterministic
@pytest.mark.parametrize("arch", ARCHS)
def test_batch_equals_single(folders: dict[str, Path], arch: str) -> None:
    adapter = load(folders, arch)
    items, _ = encode(GlinerPrompts.from_dir(folders[arch]), TEXTS, LABEL_SETS[0])
    batched = run(adapter, [*items, items[0]])  # with a duplicate, and "" (no words) among them
    for i, single in enumerate(items):
        (alone,) = run(adapter, [single])
        np.testing.assert_allclose(batched[i], alone, atol=ATOL)
    np.testing.assert_allclose(batched[-1], batched[0], atol=ATOL)
    assert len(batched[TEXTS.index("")]) == 0


@deterministic
@pytest.mark.parametrize("arch", ARCHS)
def test_label_sets_differ_per_item(folders: dict[str, Path], models: dict[str, Any], arch: str) -> None:
    prompts = GlinerPrompts.from_dir(folders[arch])
    jobs = [
        (TEXTS[0], LABEL_SETS[0]),
        (TEXTS[3], LABEL_SETS[1]),
        (TEXTS[1], LABEL_SETS[2]),
        (TEXTS[3], ["x"]),
    ]
    encoded = [encode(prompts, [text], labels) for text, labels in jobs]
    rows = run(load(folders, arch), [items[0] for items, _ in encoded])
    for (text, labels), (_, words), item_rows in zip(jobs, encoded, rows, strict=True):
        assert len(item_rows) == len(words[0]) * MAX_WIDTH * len(dict.fromkeys(labels))
        got = decode(item_rows, len(words[0]), labels, words[0], text, 0.5)
        assert_same_entities(got, reference_entities(models[arch], text, labels, 0.5))


@deterministic
def test_markers_typed_in_the_text_do_not_count_as_labels(folders: dict[str, Path]) -> None:
    text = "a <<ENT>> b <<SEP>> c"  # the word splitter cuts the markers into "<", "<", "ENT", ...
    items, words = encode(GlinerPrompts.from_dir(folders["bert"]), [text], ["person", "date"])
    (rows,) = run(load(folders, "bert"), items)
    assert len(words[0]) == 13 and len(rows) == len(words[0]) * MAX_WIDTH * 2


@deterministic
def test_adapter_surface(folders: dict[str, Path]) -> None:
    adapter = load(folders, "bert")
    assert adapter.kinds == frozenset({ResultKind.TOKEN_SCORES})
    assert (adapter.max_width, adapter.pad_token_id) == (MAX_WIDTH, 0)
    assert adapter.ent_token_id == GlinerPrompts.from_dir(folders["bert"]).ent_token_id
    assert adapter.memory_bytes() > 0
    items, _ = encode(GlinerPrompts.from_dir(folders["bert"]), ["Hi there"], ["person"])
    ids = torch.from_numpy(items[0][0].astype(np.int64))[None]
    from sie.gpu_proc.adapters.base import ForwardInputs

    no_aux = ForwardInputs(ids, torch.ones_like(ids), None, None, [ids.shape[1]], False)
    with pytest.raises(ValueError, match="words_mask"):
        adapter.forward(no_aux, frozenset({ResultKind.TOKEN_SCORES}))
    adapter.close()
    assert adapter.memory_bytes() == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_cuda_matches_cpu(folders: dict[str, Path], precision: str) -> None:
    profile = {"adapter": "gliner", "compute_precision": precision}
    config = parse_model_config({"sie_id": "tiny/gliner", "profiles": {"default": profile}})
    items, _ = encode(GlinerPrompts.from_dir(folders["deberta"]), TEXTS, LABEL_SETS[0])
    cpu = run(load_adapter(config, folders["deberta"], "cpu"), items)
    adapter = load_adapter(config, folders["deberta"], "cuda")
    assert adapter.device.type == "cuda" and adapter.dtype == getattr(torch, precision)
    gpu = run(adapter, items, device="cuda")
    for on_cpu, on_gpu in zip(cpu, gpu, strict=True):
        # Logits are O(1); fp16 keeps about 3 decimal digits, and cuDNN may run fp32 LSTMs in TF32.
        np.testing.assert_allclose(on_gpu, on_cpu, atol=5e-2 if precision == "float16" else 1e-2)
    adapter.close()
