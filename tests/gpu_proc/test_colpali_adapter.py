"""ColPaliAdapter through the device path against transformers' ColPaliProcessor + ColPaliForRetrieval.

Pages go as the frontend sends them (decoded and resized uint8 pixels with the recipe's prompt ids,
sie.frontend.colpali), queries as the recipe tokenizes them; the reference runs the processor's
output through the model one item at a time, so no padding. float32, atol 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.frontend.colbert import maxsim
from sie.frontend.colpali import ColPaliRecipe
from sie.frontend.media.images import decode_image
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.colpali import ColPaliAdapter
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch
from tests import media_samples as samples
from tests.gpu_proc.device_path import device_run
from tests.tiny_models.colpali import make_colpali, model_yaml_colpali, reference_images, reference_queries

QUERIES = ["the cat", "hi", "What is the revenue of the company in 2023, by quarter and region?", "x"]
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.jpeg(32, 32, seed=3), samples.gif(30, 20)]
ATOL = 1e-4

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colpali(tmp_path_factory.mktemp("colpali"))


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColPaliRecipe:
    return ColPaliRecipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ColPaliAdapter:
    loaded = load_adapter(parse_model_config(model_yaml_colpali("tiny/colpali", folder)), folder, "cpu")
    assert isinstance(loaded, ColPaliAdapter)
    return loaded


def page_request(recipe: ColPaliRecipe, images: list[bytes]) -> TokenBatch:
    pages = [recipe.page(decode_image(data, None, 10**8, "x").pixels) for data in images]
    n = len(pages)
    return TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.arange(n + 1, dtype=np.int32) * len(recipe.image_ids),
        input_ids=np.concatenate([page.input_ids for page in pages]),
        output_mask=OutputMask.MULTIVECTOR,
        pixels=np.stack([page.pixels for page in pages]),
    )


def query_request(recipe: ColPaliRecipe, texts: list[str]) -> TokenBatch:
    encoded = recipe.queries(texts)
    return TokenBatch(
        req_id=2,
        op=Op.ENCODE,
        model_slot=0,
        offsets=encoded.offsets,
        input_ids=encoded.input_ids,
        output_mask=OutputMask.MULTIVECTOR,
    )


def vectors(adapter: ColPaliAdapter, request: TokenBatch) -> list[np.ndarray]:
    output = device_run(adapter, request)[ResultKind.MULTIVECTOR]
    assert output.row_offsets is not None
    bounds = output.row_offsets.tolist()
    return [output.values[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


def assert_matrices(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert [m.shape for m in got] == [m.shape for m in want]
    for mine, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=ATOL)


def test_page_vectors_match_transformers(
    folder: Path, recipe: ColPaliRecipe, adapter: ColPaliAdapter
) -> None:
    assert_matrices(vectors(adapter, page_request(recipe, IMAGES)), reference_images(folder, IMAGES))


def test_query_vectors_match_transformers(
    folder: Path, recipe: ColPaliRecipe, adapter: ColPaliAdapter
) -> None:
    # Queries of different lengths share one right-padded batch here; the reference runs each alone.
    assert_matrices(vectors(adapter, query_request(recipe, QUERIES)), reference_queries(folder, QUERIES))


def test_maxsim_scores_match_the_processors_score_retrieval(
    folder: Path, recipe: ColPaliRecipe, adapter: ColPaliAdapter
) -> None:
    import torch
    import transformers

    processor = transformers.ColPaliProcessor.from_pretrained(folder)
    pages = vectors(adapter, page_request(recipe, IMAGES))
    queries = vectors(adapter, query_request(recipe, QUERIES))
    want = processor.score_retrieval(
        [torch.from_numpy(m) for m in reference_queries(folder, QUERIES)],
        [torch.from_numpy(m) for m in reference_images(folder, IMAGES)],
    ).numpy()
    got = np.stack([maxsim(query, pages) for query in queries])
    np.testing.assert_allclose(got, want, atol=ATOL * 10)


def test_page_batch_equals_single_in_any_order(recipe: ColPaliRecipe, adapter: ColPaliAdapter) -> None:
    singles = [vectors(adapter, page_request(recipe, [data]))[0] for data in IMAGES]
    order = [2, 0, 3, 2, 1]  # shuffled, with a duplicate
    assert_matrices(
        vectors(adapter, page_request(recipe, [IMAGES[i] for i in order])), [singles[i] for i in order]
    )


def test_a_page_batch_over_the_token_budget_runs_in_parts(
    recipe: ColPaliRecipe, adapter: ColPaliAdapter
) -> None:
    whole = vectors(adapter, page_request(recipe, IMAGES))
    budget = adapter._max_batch_tokens
    adapter._max_batch_tokens = len(recipe.image_ids) + 1  # one page per forward
    try:
        assert_matrices(vectors(adapter, page_request(recipe, IMAGES)), whole)
    finally:
        adapter._max_batch_tokens = budget
