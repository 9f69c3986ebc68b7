"""GlinerBiAdapter + Runner + the frontend's inputs and decode, against the `gliner` package's own
bi-encoder (predict_entities, and batch_predict_with_embeds on encode_labels' embeddings)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.gliner import decode
from sie.frontend.gliner_bi import LABELS_TOKENIZER_DIR, GlinerBiInputs
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import ForwardInputs
from sie.gpu_proc.adapters.gliner_bi import LABEL_SETS_CACHED, GlinerBiAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.gliner_bi import MAX_WIDTH, make_gliner_bi, model_yaml_gliner_bi

gliner = pytest.importorskip("gliner")

# Text encoder (Ettin's ModernBERT, or BERT), and a model with gliner's post-fusion cross-attention.
VARIANTS = {
    "modernbert": {},
    "bert": {"arch": "bert"},
    "fusion": {"arch": "bert", "post_fusion": "l2l-l2t-t2t"},
}
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

deterministic = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        name: make_gliner_bi(tmp_path_factory.mktemp(f"gliner-bi-{name}"), **kw)
        for name, kw in VARIANTS.items()
    }


@pytest.fixture(scope="module")
def models(folders: dict[str, Path]) -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gliner's "resizing embeddings is not supported" for bi-encoders
        return {
            name: gliner.GLiNER.from_pretrained(str(f), local_files_only=True) for name, f in folders.items()
        }


def load(folders: dict[str, Path], name: str) -> GlinerBiAdapter:
    config = parse_model_config(model_yaml_gliner_bi(f"tiny/gliner-bi-{name}", folders[name]))
    adapter = load_adapter(config, folders[name], "cpu")
    assert isinstance(adapter, GlinerBiAdapter)
    return adapter


def run(
    adapter: GlinerBiAdapter, items: list[tuple[np.ndarray, np.ndarray]], device: str = "cpu"
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


def encode(inputs: GlinerBiInputs, texts: list[str], labels: list[str]) -> tuple[list[Any], list[Any]]:
    encoded, words = inputs.encode(texts, labels)
    assert encoded.aux is not None
    bounds = list(zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True))
    return [(encoded.input_ids[s:e], encoded.aux[s:e]) for s, e in bounds], words


def reference_entities(
    model: Any, text: str, labels: list[str], threshold: float, **kw: Any
) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sentence of length")  # gliner's max_len cut
        entities: list[dict[str, Any]] = model.predict_entities(text, labels, threshold=threshold, **kw)
    return entities


def assert_same_entities(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    keys = ("start", "end", "text", "label")
    assert [tuple(e[k] for k in keys) for e in got] == [tuple(e[k] for k in keys) for e in want]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in want], atol=SCORE_ATOL)
    assert all(e["bbox"] is None for e in got)


@deterministic
@pytest.mark.parametrize("name", list(VARIANTS))
def test_logits_match_gliner_forward(folders: dict[str, Path], models: dict[str, Any], name: str) -> None:
    adapter, model = load(folders, name), models[name]
    labels = LABEL_SETS[0]
    items, words = encode(GlinerBiInputs.from_dir(folders[name]), TEXTS[:-1], labels)
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
@pytest.mark.parametrize("name", list(VARIANTS))
def test_entities_match_predict_entities(
    folders: dict[str, Path], models: dict[str, Any], name: str, labels: list[str], threshold: float
) -> None:
    items, words = encode(GlinerBiInputs.from_dir(folders[name]), TEXTS, labels)
    found = 0
    for i, rows in enumerate(run(load(folders, name), items)):
        got = decode(rows, len(words[i]), labels, words[i], TEXTS[i], threshold)
        assert_same_entities(got, reference_entities(models[name], TEXTS[i], labels, threshold))
        found += len(got)
    assert found >= 3  # the comparison is not between two empty lists


@deterministic
@pytest.mark.parametrize(("flat_ner", "multi_label"), [(False, False), (True, True), (False, True)])
def test_flat_ner_and_multi_label_match_predict_entities(
    folders: dict[str, Path], models: dict[str, Any], flat_ner: bool, multi_label: bool
) -> None:
    labels = LABEL_SETS[0]
    items, words = encode(GlinerBiInputs.from_dir(folders["modernbert"]), TEXTS[:4], labels)
    for i, rows in enumerate(run(load(folders, "modernbert"), items)):
        got = decode(rows, len(words[i]), labels, words[i], TEXTS[i], 0.5, flat_ner, multi_label)
        want = reference_entities(
            models["modernbert"], TEXTS[i], labels, 0.5, flat_ner=flat_ner, multi_label=multi_label
        )
        assert_same_entities(got, want)


@deterministic
def test_entities_match_precomputed_label_embeddings(
    folders: dict[str, Path], models: dict[str, Any]
) -> None:
    # SIE's precompute_labels path: encode_labels once, then batch_predict_with_embeds.
    model, labels = models["modernbert"], LABEL_SETS[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tqdm's progress bar, the max_len cut
        embeddings = model.encode_labels(labels)
        want = model.batch_predict_with_embeds(TEXTS, embeddings, labels, threshold=0.5)
    adapter = load(folders, "modernbert")
    items, words = encode(GlinerBiInputs.from_dir(folders["modernbert"]), TEXTS, labels)
    for i, rows in enumerate(run(adapter, items)):
        assert_same_entities(decode(rows, len(words[i]), labels, words[i], TEXTS[i], 0.5), want[i])
    (label_set,) = adapter._label_sets  # one set, encoded once for the whole batch
    np.testing.assert_allclose(adapter._label_sets[label_set].numpy(), embeddings.numpy(), atol=ATOL)


@deterministic
@pytest.mark.parametrize("name", ["modernbert", "fusion"])
def test_batch_equals_single(folders: dict[str, Path], name: str) -> None:
    adapter = load(folders, name)
    items, _ = encode(GlinerBiInputs.from_dir(folders[name]), TEXTS, LABEL_SETS[0])
    batched = run(adapter, [*items, items[0]])  # with a duplicate, and "" (no words) among them
    for i, single in enumerate(items):
        (alone,) = run(adapter, [single])
        np.testing.assert_allclose(batched[i], alone, atol=ATOL)
    np.testing.assert_allclose(batched[-1], batched[0], atol=ATOL)
    assert len(batched[TEXTS.index("")]) == 0


@deterministic
@pytest.mark.parametrize("name", ["modernbert", "fusion"])
def test_label_sets_differ_per_item(folders: dict[str, Path], models: dict[str, Any], name: str) -> None:
    inputs = GlinerBiInputs.from_dir(folders[name])
    jobs = [
        (TEXTS[0], LABEL_SETS[0]),
        (TEXTS[3], LABEL_SETS[1]),
        (TEXTS[1], LABEL_SETS[2]),
        (TEXTS[3], ["x"]),
    ]
    encoded = [encode(inputs, [text], labels) for text, labels in jobs]
    adapter = load(folders, name)
    rows = run(adapter, [items[0] for items, _ in encoded])
    for (text, labels), (_, words), item_rows in zip(jobs, encoded, rows, strict=True):
        assert len(item_rows) == len(words[0]) * MAX_WIDTH * len(dict.fromkeys(labels))
        got = decode(item_rows, len(words[0]), labels, words[0], text, 0.5)
        assert_same_entities(got, reference_entities(models[name], text, labels, 0.5))
    assert len(adapter._label_sets) == len(jobs)


@deterministic
def test_label_sets_are_cached_least_recently_used_first(folders: dict[str, Path]) -> None:
    adapter = load(folders, "bert")
    inputs = GlinerBiInputs.from_dir(folders["bert"])
    (first,), _ = encode(inputs, [TEXTS[0]], ["person", "city"])
    (want,) = run(adapter, [first])
    calls = 0
    encode_labels = adapter.encode_labels

    def counting(label_set: Any) -> torch.Tensor:
        nonlocal calls
        calls += 1
        return encode_labels(label_set)

    adapter.encode_labels = counting  # type: ignore[method-assign]
    (again,) = run(adapter, [first])
    assert calls == 0
    np.testing.assert_array_equal(again, want)  # a cache hit gives the very same logits
    for n in range(LABEL_SETS_CACHED):
        (item,), _ = encode(inputs, ["Hi"], [f"label {n}"])
        run(adapter, [item])
    assert calls == LABEL_SETS_CACHED and len(adapter._label_sets) == LABEL_SETS_CACHED
    (again,) = run(adapter, [first])  # pushed out by the 64 newer sets: encoded anew
    assert calls == LABEL_SETS_CACHED + 1
    np.testing.assert_allclose(again, want, atol=ATOL)


@deterministic
def test_adapter_surface(folders: dict[str, Path]) -> None:
    adapter = load(folders, "bert")
    assert adapter.kinds == frozenset({ResultKind.TOKEN_SCORES})
    assert (adapter.max_width, adapter.pad_token_id) == (MAX_WIDTH, 0)
    assert adapter.memory_bytes() > 0
    (item,), _ = encode(GlinerBiInputs.from_dir(folders["bert"]), ["Hi there"], ["person"])
    ids = torch.from_numpy(item[0].astype(np.int64))[None]
    no_aux = ForwardInputs(ids, torch.ones_like(ids), None, None, [ids.shape[1]], False)
    with pytest.raises(ValueError, match="words_mask"):
        adapter.forward(no_aux, frozenset({ResultKind.TOKEN_SCORES}))
    adapter.close()
    assert adapter.memory_bytes() == 0 and not adapter._label_sets


@deterministic
def test_a_folder_without_labels_tokenizer_loads(folders: dict[str, Path], tmp_path: Path) -> None:
    # Published checkpoints only name their labels encoder's hub repository; the device reads no
    # tokenizer of it (the frontend tokenizes the labels), so it loads without it.
    bare = Path(shutil.copytree(folders["bert"], tmp_path / "bare"))
    shutil.rmtree(bare / LABELS_TOKENIZER_DIR)
    items, _ = encode(GlinerBiInputs.from_dir(folders["bert"]), TEXTS[:2], LABEL_SETS[0])
    config = parse_model_config(model_yaml_gliner_bi("tiny/bare", bare))
    adapter = load_adapter(config, bare, "cpu")
    for got, want in zip(run(adapter, items), run(load(folders, "bert"), items), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_uni_encoder_is_refused(tmp_path: Path) -> None:
    from tests.tiny_models.gliner import make_gliner

    folder = make_gliner(tmp_path / "uni")
    config = parse_model_config(model_yaml_gliner_bi("tiny/uni", folder))
    with pytest.raises(ValueError, match="UniEncoderSpanGLiNER not supported"):
        load_adapter(config, folder, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_cuda_matches_cpu(folders: dict[str, Path], precision: str) -> None:
    profile = {"adapter": "gliner_bi", "compute_precision": precision}
    config = parse_model_config({"sie_id": "tiny/gliner-bi", "profiles": {"default": profile}})
    items, _ = encode(GlinerBiInputs.from_dir(folders["modernbert"]), TEXTS, LABEL_SETS[0])
    cpu = run(load_adapter(config, folders["modernbert"], "cpu"), items)
    adapter = load_adapter(config, folders["modernbert"], "cuda")
    assert adapter.device.type == "cuda" and adapter.dtype == getattr(torch, precision)
    gpu = run(adapter, items, device="cuda")
    for on_cpu, on_gpu in zip(cpu, gpu, strict=True):
        # Logits are O(1)-O(10); fp16 keeps about 3 decimal digits, and CUDA may run fp32 in TF32.
        np.testing.assert_allclose(on_gpu, on_cpu, atol=1e-1 if precision == "float16" else 1e-2)
    adapter.close()
