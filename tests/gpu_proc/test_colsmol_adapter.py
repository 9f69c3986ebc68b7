"""ColSmolAdapter through the device path against SIE's ColSmol recipe on transformers' and PEFT's
code (tests/tiny_models/colsmol.py: colpali-engine's ColIdefics3, the LoRA loaded by transformers'
PEFT integration, pages and queries through Idefics3Processor as SIE's adapter calls it).

Pages go as the frontend sends them (tiles and global view stacked, with the recipe's prompt ids,
sie.frontend.colsmol), queries as the recipe tokenizes them; the reference runs each item alone, so
no padding. float32, atol 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sie.frontend.colbert import maxsim
from sie.frontend.colsmol import ColSmolRecipe
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.colsmol import ColSmolAdapter
from sie.gpu_proc.adapters.colvision import base_folder
from sie.model_config import parse_model_config
from tests import media_samples as samples
from tests.gpu_proc.test_colqwen2_adapter import (
    ATOL,
    QUERIES,
    assert_matrices,
    page_request,
    pages_alone,
    query_request,
    vectors,
)
from tests.tiny_models.colsmol import make_colsmol, model_yaml_colsmol, reference_images, reference_queries

IMAGES = [
    samples.jpeg(640, 480),  # 3 x 2 tiles
    samples.png_rgba(50, 90),  # 2 x 3
    samples.gif(30, 20),
    samples.jpeg(40, 2000),  # a column of tiles
]
SAME_TILES = [samples.jpeg(300, 200, seed=1), samples.jpeg(300, 200, seed=2), samples.webp(600, 400)]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colsmol(tmp_path_factory.mktemp("colsmol") / "lora")


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColSmolRecipe:
    return ColSmolRecipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ColSmolAdapter:
    return load(folder)


def load(folder: Path) -> ColSmolAdapter:
    loaded = load_adapter(parse_model_config(model_yaml_colsmol("tiny/colsmol", folder)), folder, "cpu")
    assert isinstance(loaded, ColSmolAdapter)
    return loaded


def test_page_vectors_match_the_reference(
    folder: Path, recipe: ColSmolRecipe, adapter: ColSmolAdapter
) -> None:
    assert_matrices(pages_alone(adapter, recipe, IMAGES), reference_images(folder, IMAGES))


def test_query_vectors_match_the_reference(
    folder: Path, recipe: ColSmolRecipe, adapter: ColSmolAdapter
) -> None:
    # Queries of different lengths share one right-padded batch here; the reference runs each alone.
    assert_matrices(vectors(adapter, query_request(recipe, QUERIES)), reference_queries(folder, QUERIES))


def test_maxsim_scores_match_the_reference_scores(
    folder: Path, recipe: ColSmolRecipe, adapter: ColSmolAdapter
) -> None:
    import torch
    import transformers

    pages = pages_alone(adapter, recipe, IMAGES)
    queries = vectors(adapter, query_request(recipe, QUERIES))
    want = transformers.ColQwen2Processor.score_retrieval(  # colpali-engine's MaxSim, as transformers has it
        None,
        [torch.from_numpy(m) for m in reference_queries(folder, QUERIES)],
        [torch.from_numpy(m) for m in reference_images(folder, IMAGES)],
    ).numpy()
    got = np.stack([maxsim(query, pages) for query in queries])
    np.testing.assert_allclose(got, want, atol=ATOL * 10)


def test_a_batch_of_pages_with_one_tile_grid_equals_each_alone(
    recipe: ColSmolRecipe, adapter: ColSmolAdapter
) -> None:
    singles = pages_alone(adapter, recipe, SAME_TILES)
    order = [2, 0, 1, 2]  # shuffled, with a duplicate
    request = page_request(recipe, [SAME_TILES[i] for i in order])
    assert_matrices(vectors(adapter, request), [singles[i] for i in order])


def test_a_page_batch_over_the_token_budget_runs_in_parts(
    recipe: ColSmolRecipe, adapter: ColSmolAdapter
) -> None:
    whole = vectors(adapter, page_request(recipe, SAME_TILES))
    budget = adapter._max_batch_tokens
    adapter._max_batch_tokens = 1  # one page per forward
    try:
        assert_matrices(vectors(adapter, page_request(recipe, SAME_TILES)), whole)
    finally:
        adapter._max_batch_tokens = budget


def test_the_lora_is_merged(folder: Path, recipe: ColSmolRecipe, adapter: ColSmolAdapter) -> None:
    """The base checkpoint alone is far from the reference, which the LoRA folder matches."""
    want = reference_queries(folder, QUERIES[:1])[0]
    base_only = load(base_folder(folder))
    unadapted = vectors(base_only, query_request(recipe, QUERIES[:1]))[0]
    assert np.abs(unadapted - want).max() > 100 * ATOL
