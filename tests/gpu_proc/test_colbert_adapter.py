"""ColbertAdapter + Runner against plain transformers + a torch Linear, on tiny random models.

Inputs are what the frontend sends (ColbertTokenization: ids plus keep/attend bits in aux). The
reference runs one item at a time, unpadded, eager attention, with PyLate's attention mask (the
ATTEND bits) and keeps the rows PyLate keeps (the KEEP bits).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

from sie.frontend.colbert import ColbertTokenization, colbert_settings
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.colbert import ColbertAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.runner import Runner
from sie.model_config import RuntimeOptions, parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.colbert import TOKEN_DIM, make_colbert, model_yaml_colbert

from .tiny import tiny_config

CPU = torch.device("cpu")
ATOL = 1e-4
MULTIVECTOR = ResultKind.MULTIVECTOR
QUERIES = [
    "What is the capital of France?",
    "late interaction",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
]
DOCUMENTS = [
    "Paris is the capital of France.",
    "ColBERT scores queries against documents token by token; MaxSim, then a sum!",
    "",
    " ".join(f"word{i}" for i in range(300)),
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("colbert")
    built = {
        "pylate": make_colbert(root / "pylate"),
        "stanford": make_colbert(root / "stanford", layout="stanford"),
        "pylate_bias": make_colbert(root / "pylate_bias", seed=1, bias=True),
    }
    # The same PyLate model with its projection as a pickled state dict instead of safetensors.
    bin_folder = root / "pylate_bin"
    shutil.copytree(built["pylate"], bin_folder)
    torch.save(
        load_file(bin_folder / "1_Dense" / "model.safetensors"), bin_folder / "1_Dense" / "pytorch_model.bin"
    )
    (bin_folder / "1_Dense" / "model.safetensors").unlink()
    built["pylate_bin"] = bin_folder
    return built


def load(folder: Path) -> ColbertAdapter:
    adapter = load_adapter(parse_model_config(model_yaml_colbert("tiny/colbert", folder)), folder, "cpu")
    assert isinstance(adapter, ColbertAdapter)
    return adapter


def tokenize(
    folder: Path, texts: list[str], is_query: bool, **runtime: object
) -> list[tuple[np.ndarray, np.ndarray]]:
    settings = colbert_settings(RuntimeOptions(**runtime), folder)  # type: ignore[arg-type]
    encoded = ColbertTokenization(TextTokenizer(folder / "tokenizer.json", 512), settings).encode(
        texts, is_query
    )
    assert encoded.aux is not None
    bounds = zip(encoded.offsets[:-1], encoded.offsets[1:], strict=True)
    return [(encoded.input_ids[a:b], encoded.aux[a:b]) for a, b in bounds]


Item = tuple[np.ndarray, np.ndarray | None]  # token ids, aux bits


def as_batch(items: Sequence[Item], is_query: bool) -> Batch:
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0, aux) for i, (ids, aux) in enumerate(items)]
    lengths = [len(ids) for ids, _ in items]
    key = GroupKey(0, int(Op.ENCODE), mask_of({MULTIVECTOR}), 0, int(is_query))
    return Batch(key, pending, sum(lengths), max(lengths), 0.0)


def run(adapter: ColbertAdapter, items: Sequence[Item], is_query: bool) -> list[np.ndarray]:
    output = Runner(CPU).run(adapter, as_batch(items, is_query))[MULTIVECTOR]
    assert output.values.dtype == np.float32 and output.row_offsets is not None
    return [output.values[a:b] for a, b in zip(output.row_offsets[:-1], output.row_offsets[1:], strict=True)]


def projection_weight(folder: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The projection as saved, read straight from the file of either layout."""
    dense = folder / "1_Dense"
    if (dense / "model.safetensors").is_file():
        state = load_file(dense / "model.safetensors")
        return state["linear.weight"], state.get("linear.bias")
    if (dense / "pytorch_model.bin").is_file():
        return torch.load(dense / "pytorch_model.bin", weights_only=True)["linear.weight"], None
    return load_file(folder / "model.safetensors")["linear.weight"], None


def reference(folder: Path, items: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    weight, bias = projection_weight(folder)
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    linear.weight.data.copy_(weight)
    if bias is not None:
        linear.bias.data.copy_(bias)
    rows = []
    with torch.no_grad():
        for ids, aux in items:
            attention = torch.from_numpy(((aux >> 1) & 1).astype(np.int64))[None]
            hidden = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None], attention_mask=attention)
            vectors = linear(hidden.last_hidden_state[0])
            rows.append(vectors[torch.from_numpy(aux & 1 > 0)].numpy())
    return rows


def assert_rows_close(got: list[np.ndarray], want: list[np.ndarray], atol: float = ATOL) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=0, atol=atol)


@pytest.mark.parametrize("layout", ["pylate", "stanford", "pylate_bin", "pylate_bias"])
@pytest.mark.parametrize("is_query", [True, False])
def test_matches_plain_transformers(folders: dict[str, Path], layout: str, is_query: bool) -> None:
    folder = folders[layout]
    items = tokenize(folder, QUERIES if is_query else DOCUMENTS, is_query)
    got = run(load(folder), items, is_query)
    assert_rows_close(got, reference(folder, items))
    assert got[0].shape[1] == TOKEN_DIM
    if is_query:  # every query is expanded to 32 vectors, [MASK]s included
        assert [len(g) for g in got] == [32] * len(QUERIES)


def test_layouts_load_the_same_weights(folders: dict[str, Path]) -> None:
    items = tokenize(folders["pylate"], DOCUMENTS, is_query=False)
    outputs = [run(load(folders[layout]), items, False) for layout in ("pylate", "stanford", "pylate_bin")]
    for other in outputs[1:]:
        assert_rows_close(other, outputs[0], atol=1e-6)


def test_attending_to_expansion_tokens_changes_the_query(folders: dict[str, Path]) -> None:
    folder = folders["pylate"]
    adapter = load(folder)
    masked = tokenize(folder, QUERIES, is_query=True)
    attended = tokenize(folder, QUERIES, is_query=True, attend_to_expansion_tokens=True)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(masked, attended, strict=True))  # same ids
    got_masked, got_attended = run(adapter, masked, True), run(adapter, attended, True)
    assert_rows_close(got_attended, reference(folder, attended))
    assert not np.allclose(got_masked[0], got_attended[0], atol=1e-3)


def test_batch_equals_single_in_any_order(folders: dict[str, Path]) -> None:
    folder = folders["pylate"]
    adapter = load(folder)
    items = tokenize(folder, DOCUMENTS, False) + tokenize(folder, QUERIES, True)
    items.append(items[1])  # a duplicate
    singles = [run(adapter, [item], False)[0] for item in items]
    np.testing.assert_array_equal(singles[1], singles[-1])
    order = np.random.default_rng(0).permutation(len(items))
    shuffled = run(adapter, [items[i] for i in order], False)
    assert_rows_close(shuffled, [singles[i] for i in order], atol=1e-5)


def test_without_aux_every_real_token_is_attended_and_kept(folders: dict[str, Path]) -> None:
    folder = folders["pylate"]
    items = tokenize(folder, DOCUMENTS, False)
    plain = [(ids, None) for ids, _ in items]
    full = [(ids, np.full(len(ids), 3, np.int32)) for ids, _ in items]
    adapter = load(folder)
    assert_rows_close(run(adapter, plain, False), reference(folder, full))
    # Items with and without bits in one batch: each is read its own way.
    mixed = [items[0], plain[1], items[2], plain[3]]
    want = reference(folder, [items[0], full[1], items[2], full[3]])
    assert_rows_close(run(adapter, mixed, False), want)


def test_modernbert_encoder_keeps_unattended_rows(tmp_path: Path) -> None:
    # ModernBERT unpads masked positions in some attention paths; expansion rows must survive.
    # Each expansion token stays within the tiny model's local window (16) of a real token: a
    # query whose local window holds no attended key has no defined output (eager and SDPA differ).
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(tiny_config("modernbert"))  # type: ignore[no-untyped-call]
    model.save_pretrained(tmp_path)
    shutil.copytree(Path(make_colbert(tmp_path / "donor")) / "1_Dense", tmp_path / "1_Dense")
    rng = np.random.default_rng(1)
    items = []
    for n_real, n_expansion in ((5, 7), (17, 8), (30, 2)):
        ids = rng.integers(4, 100, n_real + n_expansion).astype(np.int32)
        aux = np.r_[np.full(n_real, 3), np.full(n_expansion, 1)].astype(np.int32)  # expansion: kept only
        items.append((ids, aux))
    adapter = ColbertAdapter.load(parse_model_config({"sie_id": "m", "adapter": "colbert"}), tmp_path, "cpu")
    assert_rows_close(run(adapter, items, True), reference(tmp_path, items))


def test_missing_projection_is_an_error(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModel.from_config(tiny_config("bert"))  # type: ignore[no-untyped-call]
    model.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="no ColBERT projection"):
        load(tmp_path)


def test_memory_and_close(folders: dict[str, Path]) -> None:
    adapter = load(folders["pylate"])
    assert adapter.memory_bytes() > 30522 * 32 * 4 and adapter.dim == TOKEN_DIM
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        run(adapter, tokenize(folders["pylate"], ["x"], False), False)


def test_matches_sentence_transformers_multi_vector_encoder(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end (tokens, encoder, projection, normalization) against an independent port of PyLate."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from sentence_transformers import MultiVectorEncoder

    folder = folders["pylate"]
    model = MultiVectorEncoder(str(folder), device="cpu")
    adapter = load(folder)
    for is_query, texts in ((True, QUERIES), (False, DOCUMENTS)):
        want = model.encode_query(texts) if is_query else model.encode_document(texts)
        got = run(adapter, tokenize(folder, texts, is_query), is_query)
        normalized = [g / np.linalg.norm(g, axis=1, keepdims=True) for g in got]
        assert_rows_close(normalized, [w.numpy() for w in want], atol=1e-5)
