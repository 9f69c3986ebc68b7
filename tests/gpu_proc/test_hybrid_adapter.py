"""HybridAdapter + Runner against plain torch: transformers' encoder and BGE-M3's two heads by hand."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.hybrid import HybridAdapter
from sie.gpu_proc.batcher import Batch, GroupKey, PendingItem
from sie.gpu_proc.outputs import Output
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, mask_of
from tests.tiny_models.hybrid import (
    CLS_ID,
    COLBERT_DIM,
    HIDDEN_SIZE,
    PAD_ID,
    SEP_ID,
    UNK_ID,
    VOCAB_SIZE,
    make_hybrid,
    model_yaml_hybrid,
)

CPU = torch.device("cpu")
ATOL = 1e-4
ALL = frozenset({ResultKind.DENSE, ResultKind.SPARSE, ResultKind.MULTIVECTOR})
# FlagEmbedding's unused tokens (cls, eos, pad, unk), spelled out for MiniLM's vocabulary.
UNUSED = {CLS_ID, SEP_ID, PAD_ID, UNK_ID}
TEXTS = [
    "what causes high blood pressure",
    "the cat 🤗 and the dog and the cat",  # repeated ids, and an [UNK]
    "",  # [CLS] [SEP] only: no sparse terms, one token vector
    "Aspirin lowers the risk of stroke in patients with atrial fibrillation, a large trial found.",
    "☃ ∰",
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def tiny_hybrid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_hybrid(tmp_path_factory.mktemp("hybrid"))


@dataclass
class Expected:
    dense: np.ndarray  # [n, hidden]
    sparse: list[dict[int, float]]  # per item: token id -> weight
    multivector: list[np.ndarray]  # per item: [length - 1, colbert_dim]


def load(folder: Path) -> HybridAdapter:
    adapter = load_adapter(parse_model_config(model_yaml_hybrid("tiny/hybrid", folder)), folder, "cpu")
    assert isinstance(adapter, HybridAdapter)
    return adapter


def tokenize(folder: Path, texts: list[str]) -> list[np.ndarray]:
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128
    return [np.asarray(e.ids, np.int32) for e in tokenizer.encode_batch(texts)]


def random_items(n: int, seed: int, max_len: int = 40) -> list[np.ndarray]:
    """[CLS] word pieces [SEP]; ids drawn from a small range so that items repeat ids."""
    rng = np.random.default_rng(seed)
    return [
        np.concatenate([[CLS_ID], rng.integers(1000, 1060, rng.integers(0, max_len - 1)), [SEP_ID]]).astype(
            np.int32
        )
        for _ in range(n)
    ]


def run(
    adapter: HybridAdapter,
    items: list[np.ndarray],
    kinds: frozenset[ResultKind] = ALL,
    is_query: bool = False,
) -> dict[ResultKind, Output]:
    pending = [PendingItem(0, 1, i, ids, None, 0.0, 0) for i, ids in enumerate(items)]
    lengths = [len(ids) for ids in items]
    batch = Batch(
        GroupKey(0, int(Op.ENCODE), mask_of(set(kinds)), 0, int(is_query)),
        pending,
        sum(lengths),
        max(lengths),
        0.0,
    )
    outputs = Runner(CPU).run(adapter, batch)
    assert set(outputs) == kinds
    return outputs


def reference(folder: Path, items: list[np.ndarray]) -> Expected:
    """The encoder one item at a time (no padding, eager attention) and BGE-M3's formulas by hand."""
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    sparse_linear, colbert_linear = torch.nn.Linear(HIDDEN_SIZE, 1), torch.nn.Linear(HIDDEN_SIZE, COLBERT_DIM)
    sparse_linear.load_state_dict(torch.load(folder / "sparse_linear.pt", weights_only=True))
    colbert_linear.load_state_dict(torch.load(folder / "colbert_linear.pt", weights_only=True))
    dense, sparse, multivector = [], [], []
    with torch.no_grad():
        for ids in items:
            hidden = model(input_ids=torch.from_numpy(ids.astype(np.int64))[None]).last_hidden_state[0]
            dense.append(hidden[0].numpy())
            weights: dict[int, float] = {}
            for token, weight in zip(
                ids.tolist(), torch.relu(sparse_linear(hidden))[:, 0].tolist(), strict=True
            ):
                if token not in UNUSED and weight > 0:
                    weights[token] = max(weights.get(token, 0.0), weight)
            sparse.append(weights)
            multivector.append(colbert_linear(hidden[1:]).numpy())
    return Expected(np.stack(dense), sparse, multivector)


def sparse_items(output: Output) -> list[dict[int, float]]:
    assert output.row_offsets is not None and output.indices is not None
    ends = output.row_offsets
    return [
        dict(
            zip(
                output.indices[ends[i] : ends[i + 1]].tolist(),
                output.values[ends[i] : ends[i + 1]].tolist(),
                strict=True,
            )
        )
        for i in range(output.n_items)
    ]


def token_vectors(output: Output) -> list[np.ndarray]:
    assert output.row_offsets is not None
    ends = output.row_offsets
    return [output.values[ends[i] : ends[i + 1]] for i in range(output.n_items)]


def assert_sparse_close(got: list[dict[int, float]], want: list[dict[int, float]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert sorted(g) == sorted(w)
        np.testing.assert_allclose([g[k] for k in sorted(g)], [w[k] for k in sorted(w)], rtol=0, atol=ATOL)


def assert_vectors_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert [len(g) for g in got] == [len(w) for w in want]
    np.testing.assert_allclose(np.concatenate(got), np.concatenate(want), rtol=0, atol=ATOL)


def test_all_three_match_plain_torch(tiny_hybrid: Path) -> None:
    items = tokenize(tiny_hybrid, TEXTS) + random_items(8, seed=1)
    outputs, want = run(load(tiny_hybrid), items), reference(tiny_hybrid, items)
    dense = outputs[ResultKind.DENSE]
    assert dense.values.dtype == np.float32 and dense.values.shape == (len(items), HIDDEN_SIZE)
    np.testing.assert_allclose(dense.values, want.dense, rtol=0, atol=ATOL)
    assert_sparse_close(sparse_items(outputs[ResultKind.SPARSE]), want.sparse)
    assert_vectors_close(token_vectors(outputs[ResultKind.MULTIVECTOR]), want.multivector)
    # The random items repeat ids (60 distinct ids, up to 40 tokens), and some ids get no weight.
    distinct = sum(len(set(ids.tolist()) - UNUSED) for ids in items[5:])
    assert want.sparse[2] == {} and 0 < sum(map(len, want.sparse[5:])) < distinct


@pytest.mark.parametrize("kind", sorted(ALL))
def test_each_kind_alone_equals_all_together(tiny_hybrid: Path, kind: ResultKind) -> None:
    adapter, items = load(tiny_hybrid), tokenize(tiny_hybrid, TEXTS) + random_items(6, seed=2)
    alone, together = run(adapter, items, frozenset({kind}))[kind], run(adapter, items)[kind]
    np.testing.assert_array_equal(alone.values, together.values)
    for field in ("row_offsets", "indices"):
        left, right = getattr(alone, field), getattr(together, field)
        assert (left is None and right is None) or np.array_equal(left, right)


def test_sparse_layout(tiny_hybrid: Path) -> None:
    output = run(load(tiny_hybrid), random_items(12, seed=3), frozenset({ResultKind.SPARSE}))[
        ResultKind.SPARSE
    ]
    assert output.row_offsets is not None and output.indices is not None
    assert output.values.dtype == np.float32 and output.values.ndim == 1 and (output.values > 0).all()
    assert output.indices.dtype == np.int32 and output.row_offsets.dtype == np.int64
    for i in range(output.n_items):
        indices = output.indices[output.row_offsets[i] : output.row_offsets[i + 1]]
        assert (np.diff(indices) > 0).all() and not set(indices.tolist()) & UNUSED


def test_batch_equals_single_in_any_order(tiny_hybrid: Path) -> None:
    adapter = load(tiny_hybrid)
    items = random_items(24, seed=4, max_len=60) + tokenize(tiny_hybrid, TEXTS)
    items.append(items[3].copy())  # a duplicate
    singles = [run(adapter, [ids]) for ids in items]
    order = np.random.default_rng(5).permutation(len(items))
    batch = run(adapter, [items[i] for i in order])
    want_dense = np.concatenate([singles[i][ResultKind.DENSE].values for i in order])
    np.testing.assert_allclose(batch[ResultKind.DENSE].values, want_dense, rtol=0, atol=ATOL)
    want_sparse = [sparse_items(singles[i][ResultKind.SPARSE])[0] for i in order]
    assert_sparse_close(sparse_items(batch[ResultKind.SPARSE]), want_sparse)
    want_vectors = [token_vectors(singles[i][ResultKind.MULTIVECTOR])[0] for i in order]
    assert_vectors_close(token_vectors(batch[ResultKind.MULTIVECTOR]), want_vectors)
    duplicate = [singles[3], singles[-1]]
    for kind in ALL:
        np.testing.assert_array_equal(duplicate[0][kind].values, duplicate[1][kind].values)


def test_queries_and_documents_encode_alike(tiny_hybrid: Path) -> None:
    adapter, items = load(tiny_hybrid), tokenize(tiny_hybrid, TEXTS)
    as_query, as_doc = run(adapter, items, is_query=True), run(adapter, items)
    for kind in ALL:
        np.testing.assert_array_equal(as_query[kind].values, as_doc[kind].values)


def test_special_tokens_come_from_the_model_files(tiny_hybrid: Path, tmp_path: Path) -> None:
    assert load(tiny_hybrid).special_ids == sorted(UNUSED)
    # A head that weighs every token 1.0 (the random one happens to give specials negative weights).
    folder = copy_model(tiny_hybrid, tmp_path / "flat", skip="sparse_linear.pt")
    flat = torch.nn.Linear(HIDDEN_SIZE, 1)
    torch.nn.init.zeros_(flat.weight)
    torch.nn.init.ones_(flat.bias)
    torch.save(flat.state_dict(), folder / "sparse_linear.pt")
    items = tokenize(folder, TEXTS)
    got = sparse_items(run(load(folder), items, frozenset({ResultKind.SPARSE}))[ResultKind.SPARSE])
    assert got == [dict.fromkeys(sorted(set(ids.tolist()) - UNUSED), 1.0) for ids in items]
    assert got[2] == {} and got[4] == {}  # [CLS] [SEP] and [CLS] [UNK] [UNK] [SEP]


def test_adapter_facts_and_close(tiny_hybrid: Path) -> None:
    adapter = load(tiny_hybrid)
    facts = (adapter.name, adapter.dim, adapter.colbert_dim, adapter.vocab_size, adapter.pad_token_id)
    assert facts == ("tiny/hybrid", HIDDEN_SIZE, COLBERT_DIM, VOCAB_SIZE, PAD_ID)
    assert adapter.kinds == ALL and adapter.dtype == torch.float32
    model = adapter._model
    assert model is not None and not model.training
    modules = [model, adapter._sparse_linear, adapter._colbert_linear]
    expected = sum(t.numel() * t.element_size() for m in modules for t in [*m.parameters(), *m.buffers()])
    assert adapter.memory_bytes() == expected > 0
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        run(adapter, random_items(1, seed=0))


def test_missing_head_is_an_error(tiny_hybrid: Path, tmp_path: Path) -> None:
    folder = copy_model(tiny_hybrid, tmp_path / "headless", skip="colbert_linear.pt")
    with pytest.raises(FileNotFoundError, match=r"colbert_linear\.pt"):
        load(folder)


def copy_model(source: Path, folder: Path, skip: str) -> Path:
    folder.mkdir()
    for path in source.iterdir():
        if path.name != skip:
            (folder / path.name).write_bytes(path.read_bytes())
    return folder
