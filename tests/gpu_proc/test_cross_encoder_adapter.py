"""CrossEncoderAdapter + Runner + the frontend's scoring against sentence-transformers' CrossEncoder."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from sie.frontend.scoring import activation_of, item_scores, rank
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.cross_encoder import CrossEncoderAdapter
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import ResultKind
from tests.tiny_models.cross_encoder import make_cross_encoder, model_yaml_cross_encoder, pairs_batch

CPU = torch.device("cpu")
ATOL = 1e-4
# (arch, num_labels) of the tiny models under test.
VARIANTS = [("bert", 1), ("bert", 3), ("xlmr", 1), ("modernbert", 1)]
QUERY = "how long do cats sleep"
DOCS = [
    "Cats sleep between 12 and 16 hours a day, often in short naps.",
    "The stock market closed higher on Friday.",
    "Kittens and older cats sleep even longer than adults.",
    "Python is a programming language that lets you work quickly.",
    "A cat's sleep is light: its ears keep turning towards sounds.",
    "Dogs sleep about 12 hours a day.",
    "cats",
    "The quick brown fox jumps over the lazy dog " * 30,
]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Path]:
    return {
        (arch, n): make_cross_encoder(tmp_path_factory.mktemp(f"{arch}{n}"), seed=1, num_labels=n, arch=arch)
        for arch, n in VARIANTS
    }


def load(folder: Path, family: str = "cross_encoder") -> CrossEncoderAdapter:
    raw = model_yaml_cross_encoder("tiny/ce", folder) | {"adapter": family}
    adapter = load_adapter(parse_model_config(raw), folder, "cpu")
    assert isinstance(adapter, CrossEncoderAdapter)
    return adapter


def logits_of(adapter: CrossEncoderAdapter, folder: Path, queries: list[str], docs: list[str]) -> np.ndarray:
    output = Runner(CPU).run(adapter, pairs_batch(folder, queries, docs))[ResultKind.SCORES]
    assert output.values.dtype == np.float32 and output.row_offsets is None
    return output.values


def st_predict(folder: Path, pairs: list[tuple[str, str]]) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its deprecation notices and progress-bar chatter
        model = CrossEncoder(str(folder), device="cpu", local_files_only=True)
        result: np.ndarray = np.asarray(model.predict(pairs, batch_size=3), dtype=np.float32)
    return result


@pytest.mark.parametrize(("arch", "n_labels"), VARIANTS)
def test_scores_match_sentence_transformers(
    folders: dict[tuple[str, int], Path], arch: str, n_labels: int
) -> None:
    folder = folders[(arch, n_labels)]
    logits = logits_of(load(folder), folder, [QUERY] * len(DOCS), DOCS)
    assert logits.shape == (len(DOCS), n_labels)
    want = st_predict(folder, [(QUERY, doc) for doc in DOCS])
    activation = activation_of(folder, None)
    assert activation == ("sigmoid" if n_labels == 1 else "identity")
    got = item_scores(logits, activation)
    assert got.shape == (len(DOCS),) and got.dtype == np.float32
    if n_labels == 1:
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
        assert np.ptp(got) > 0.01  # the tiny model's scores really differ between documents
    else:
        np.testing.assert_allclose(logits, want, rtol=0, atol=ATOL)  # identity: the raw rows
        np.testing.assert_allclose(got, want[:, -1], rtol=0, atol=ATOL)  # the last label's column


@pytest.mark.parametrize(("arch", "n_labels"), VARIANTS)
def test_batch_equals_single_in_any_order(
    folders: dict[tuple[str, int], Path], arch: str, n_labels: int
) -> None:
    folder = folders[(arch, n_labels)]
    adapter = load(folder)
    docs = [*DOCS, DOCS[2]]  # a duplicate
    queries = [QUERY if i % 2 else "sleep" for i in range(len(docs))]
    singles = np.concatenate(
        [logits_of(adapter, folder, [q], [d]) for q, d in zip(queries, docs, strict=True)]
    )
    assert np.array_equal(singles[2], singles[len(DOCS)])
    order = np.random.default_rng(0).permutation(len(docs)).tolist()
    shuffled = logits_of(adapter, folder, [queries[i] for i in order], [docs[i] for i in order])
    np.testing.assert_allclose(shuffled, singles[order], rtol=0, atol=1e-5)


def test_ranking_follows_sentence_transformers(folders: dict[tuple[str, int], Path]) -> None:
    folder = folders[("bert", 1)]
    scores = item_scores(logits_of(load(folder), folder, [QUERY] * len(DOCS), DOCS), "sigmoid")
    ids = [f"item-{i}" for i in range(len(DOCS))]
    ranked = rank(scores, ids)
    want = np.argsort(-st_predict(folder, [(QUERY, doc) for doc in DOCS]), kind="stable")
    assert [r["item_id"] for r in ranked] == [ids[i] for i in want.tolist()]
    assert [r["rank"] for r in ranked] == list(range(len(DOCS)))


def test_bert_uses_pair_token_types(folders: dict[tuple[str, int], Path]) -> None:
    folder = folders[("bert", 1)]
    adapter, batch = load(folder), pairs_batch(folder, [QUERY] * 3, DOCS[:3])
    assert all(item.token_type_ids is not None and item.token_type_ids.any() for item in batch.items)
    with_types = Runner(CPU).run(adapter, batch)[ResultKind.SCORES].values
    for item in batch.items:
        item.token_type_ids = None
    without = Runner(CPU).run(adapter, batch)[ResultKind.SCORES].values
    assert np.abs(with_types - without).max() > 1e-3


def test_xlmr_pads_with_its_pad_id(folders: dict[tuple[str, int], Path]) -> None:
    adapter = load(folders[("xlmr", 1)])
    assert adapter.pad_token_id == 1  # positions count from the padding id: padding with 0 would shift them


def test_nli_family_loads_the_same_adapter(folders: dict[tuple[str, int], Path]) -> None:
    adapter = load(folders[("bert", 3)], family="nli_zero_shot")
    assert adapter.kinds == frozenset({ResultKind.SCORES}) and adapter.num_labels == 3


def test_memory_and_close(folders: dict[tuple[str, int], Path]) -> None:
    folder = folders[("bert", 1)]
    adapter = load(folder)
    assert adapter.memory_bytes() > 30522 * 32 * 4  # at least the word embeddings
    adapter.close()
    assert adapter.memory_bytes() == 0
    with pytest.raises(RuntimeError, match="closed"):
        logits_of(adapter, folder, [QUERY], [DOCS[0]])
