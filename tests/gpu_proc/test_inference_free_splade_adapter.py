"""Document side of inference-free sparse encoders: SpladeAdapter + Runner against sentence-transformers'
published recipe (Router document route: MLMTransformer + SpladePooling) on the same tiny weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.gpu_proc.adapters.splade import SpladeAdapter, pooling_activation
from tests.gpu_proc.test_splade_adapter import TEXTS, densify, load, random_items, run, tokenize
from tests.tiny_models.inference_free_splade import (
    POOLING_FOLDER,
    make_inference_free_splade,
    reference_encoder,
)

ATOL = 1e-4

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(
    scope="module",
    params=[("log1p_relu", True), ("relu", True), ("log1p_relu", False)],
    ids=["distilbert-log1p_relu", "distilbert-relu", "bert-log1p_relu"],
)
def tiny_doc_model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    activation, is_distilbert = request.param
    return make_inference_free_splade(tmp_path_factory.mktemp("doc"), activation, is_distilbert=is_distilbert)


def reference_documents(folder: Path, texts: list[str]) -> np.ndarray:
    encoded = reference_encoder(folder).encode_document(
        texts, convert_to_tensor=True, convert_to_sparse_tensor=False
    )
    result: np.ndarray = encoded.float().numpy()
    return result


def test_documents_match_sentence_transformers(tiny_doc_model: Path) -> None:
    adapter = load(tiny_doc_model)
    activation = pooling_activation(tiny_doc_model)
    assert adapter.is_log1p_relu == (activation == "log1p_relu")
    got = densify(run(adapter, tokenize(tiny_doc_model, TEXTS)))
    want = reference_documents(tiny_doc_model, TEXTS)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert ((want > 0).sum(axis=1) > 50).all()  # a few hundred terms each: the comparison means something


def test_padded_path_matches_the_packed_one(tiny_doc_model: Path) -> None:
    adapter = load(tiny_doc_model)
    items = random_items(12, seed=5, max_len=50)
    packed = densify(run(adapter, items))
    adapter.is_padding_free = False  # the padded forward: same formula, different route to it
    np.testing.assert_allclose(densify(run(adapter, items)), packed, rtol=0, atol=ATOL)
    singles = np.concatenate([densify(run(adapter, [ids])) for ids in items])
    np.testing.assert_allclose(singles, packed, rtol=0, atol=ATOL)


def test_pooling_activation_is_read_from_the_folder(tmp_path: Path) -> None:
    assert pooling_activation(tmp_path) == "relu"  # a plain SPLADE folder says nothing
    (tmp_path / "1_SpladePooling").mkdir()
    (tmp_path / "1_SpladePooling" / "config.json").write_text('{"activation_function": "log1p_relu"}')
    assert pooling_activation(tmp_path) == "log1p_relu"
    (tmp_path / "1_SpladePooling" / "config.json").write_text('{"activation_function": "gelu"}')
    with pytest.raises(ValueError, match="gelu"):
        pooling_activation(tmp_path)


def test_log1p_relu_is_one_more_log1p(tmp_path: Path) -> None:
    folder = make_inference_free_splade(tmp_path / "m", activation="log1p_relu")
    items = tokenize(folder, TEXTS)
    doubled = densify(run(load(folder), items))
    (folder / POOLING_FOLDER / "config.json").write_text('{"activation_function": "relu"}')
    single = load(folder)
    assert isinstance(single, SpladeAdapter) and not single.is_log1p_relu
    np.testing.assert_allclose(doubled, np.log1p(densify(run(single, items))), rtol=0, atol=ATOL)
