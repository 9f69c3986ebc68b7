"""ColQwen2Adapter through the device path against colpali-engine's ColQwen2.5 recipe on transformers'
and PEFT's code (tests/tiny_models/colqwen2.py: Qwen2_5_VLModel + custom_text_proj, the LoRA loaded
by transformers' PEFT integration, pages through ColQwen2Processor).

Pages go as the frontend sends them (resized uint8 pixels with the recipe's prompt ids,
sie.frontend.colqwen2), queries as the recipe tokenizes them; the reference runs each item alone,
so no padding. float32, atol 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sie.frontend.colbert import maxsim
from sie.frontend.colqwen2 import ColQwen2Recipe
from sie.frontend.media.images import decode_image
from sie.frontend.tasks.pages import PageRecipe
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.base import Adapter
from sie.gpu_proc.adapters.colqwen2 import ColQwen2Adapter
from sie.gpu_proc.adapters.colvision import base_folder, merge_lora
from sie.model_config import ModelConfigError, parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch
from tests import media_samples as samples
from tests.gpu_proc.device_path import device_run
from tests.tiny_models.colqwen2 import (
    make_colqwen2,
    model_yaml_colqwen2,
    reference_class,
    reference_images,
    reference_queries,
)

QUERIES = ["the cat", "hi", "What is the revenue of the company in 2023, by quarter and region?", "x"]
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.gif(30, 20)]
SAME_SIZE = [samples.jpeg(300, 200, seed=1), samples.jpeg(300, 200, seed=2), samples.png_rgba(300, 200)]
ATOL = 1e-4

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colqwen2(tmp_path_factory.mktemp("colqwen2") / "lora")


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColQwen2Recipe:
    return ColQwen2Recipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ColQwen2Adapter:
    return load(folder)


def load(folder: Path) -> ColQwen2Adapter:
    loaded = load_adapter(parse_model_config(model_yaml_colqwen2("tiny/colqwen2", folder)), folder, "cpu")
    assert isinstance(loaded, ColQwen2Adapter)
    return loaded


def page_request(recipe: PageRecipe, images: list[bytes]) -> TokenBatch:
    """Pages as the frontend sends them (one shape in a request), for this and the ColSmol tests."""
    pages = [recipe.page(decode_image(data, None, 10**8, "x").pixels, "x") for data in images]
    lengths = [len(page.input_ids) for page in pages]
    return TokenBatch(
        req_id=1,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32),
        input_ids=np.concatenate([page.input_ids for page in pages]),
        output_mask=OutputMask.MULTIVECTOR,
        pixels=np.stack([page.pixels for page in pages]),
    )


def query_request(recipe: PageRecipe, texts: list[str]) -> TokenBatch:
    encoded = recipe.queries(texts)
    return TokenBatch(
        req_id=2,
        op=Op.ENCODE,
        model_slot=0,
        offsets=encoded.offsets,
        input_ids=encoded.input_ids,
        output_mask=OutputMask.MULTIVECTOR,
    )


def vectors(adapter: Adapter, request: TokenBatch) -> list[np.ndarray]:
    output = device_run(adapter, request)[ResultKind.MULTIVECTOR]
    assert output.row_offsets is not None
    bounds = output.row_offsets.tolist()
    return [output.values[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]


def pages_alone(adapter: Adapter, recipe: PageRecipe, images: list[bytes]) -> list[np.ndarray]:
    return [vectors(adapter, page_request(recipe, [data]))[0] for data in images]


def assert_matrices(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert [m.shape for m in got] == [m.shape for m in want]
    for mine, theirs in zip(got, want, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=ATOL)


def test_page_vectors_match_the_reference(
    folder: Path, recipe: ColQwen2Recipe, adapter: ColQwen2Adapter
) -> None:
    assert_matrices(pages_alone(adapter, recipe, IMAGES), reference_images(folder, IMAGES))


def test_query_vectors_match_the_reference(
    folder: Path, recipe: ColQwen2Recipe, adapter: ColQwen2Adapter
) -> None:
    # Queries of different lengths share one right-padded batch here; the reference runs each alone.
    assert_matrices(vectors(adapter, query_request(recipe, QUERIES)), reference_queries(folder, QUERIES))


def test_maxsim_scores_match_the_processors_score_retrieval(
    folder: Path, recipe: ColQwen2Recipe, adapter: ColQwen2Adapter
) -> None:
    import torch
    import transformers

    pages = pages_alone(adapter, recipe, IMAGES)
    queries = vectors(adapter, query_request(recipe, QUERIES))
    want = transformers.ColQwen2Processor.score_retrieval(
        None,  # a method that reads nothing of its processor
        [torch.from_numpy(m) for m in reference_queries(folder, QUERIES)],
        [torch.from_numpy(m) for m in reference_images(folder, IMAGES)],
    ).numpy()
    got = np.stack([maxsim(query, pages) for query in queries])
    np.testing.assert_allclose(got, want, atol=ATOL * 10)


def test_a_batch_of_same_size_pages_equals_each_alone(
    recipe: ColQwen2Recipe, adapter: ColQwen2Adapter
) -> None:
    singles = pages_alone(adapter, recipe, SAME_SIZE)
    order = [2, 0, 1, 2]  # shuffled, with a duplicate
    assert_matrices(
        vectors(adapter, page_request(recipe, [SAME_SIZE[i] for i in order])), [singles[i] for i in order]
    )


def test_a_page_batch_over_the_token_budget_runs_in_parts(
    recipe: ColQwen2Recipe, adapter: ColQwen2Adapter
) -> None:
    whole = vectors(adapter, page_request(recipe, SAME_SIZE))
    budget = adapter._max_batch_tokens
    adapter._max_batch_tokens = 1  # one page per forward
    try:
        assert_matrices(vectors(adapter, page_request(recipe, SAME_SIZE)), whole)
    finally:
        adapter._max_batch_tokens = budget


@pytest.mark.parametrize(
    ("engine_names", "whole_projection"),
    [(True, False), (False, True)],
    ids=["colpali-engine-names", "transformers-names-projection-saved-whole"],
)
def test_a_lora_checkpoint_loads_to_the_reference_with_the_lora_merged(
    tmp_path: Path, engine_names: bool, whole_projection: bool
) -> None:
    """The LoRA folder over its base checkpoint gives transformers + PEFT's outputs (LoRA applied),
    which are not the base's alone."""
    folder = make_colqwen2(
        tmp_path / "lora", seed=1, engine_names=engine_names, whole_projection=whole_projection
    )
    recipe = ColQwen2Recipe.for_model(TextTokenizer(folder / "tokenizer.json", 2048), folder)
    adapter = load(folder)
    got = pages_alone(adapter, recipe, IMAGES[:1]) + vectors(adapter, query_request(recipe, QUERIES[:1]))
    want = reference_images(folder, IMAGES[:1]) + reference_queries(folder, QUERIES[:1])
    assert_matrices(got, want)
    base_only = load(base_folder(folder))
    unadapted = vectors(base_only, query_request(recipe, QUERIES[:1]))[0]
    assert np.abs(unadapted - want[1]).max() > 100 * ATOL


def test_a_hub_id_base_is_found_in_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "0" * 40
    snapshot = tmp_path / "hub" / "models--org--base" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--org--base" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--base" / "refs" / "main").write_text(commit)
    lora = tmp_path / "lora"
    lora.mkdir()
    (lora / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base"}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert base_folder(lora) == snapshot
    assert base_folder(snapshot) == snapshot  # a full checkpoint is its own base


@pytest.mark.parametrize(
    "setting", [{"use_dora": True}, {"rank_pattern": {"q_proj": 8}}, {"peft_type": "IA3"}]
)
def test_adapter_settings_that_are_not_a_plain_lora_are_refused(
    tmp_path: Path, setting: dict[str, object]
) -> None:
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, **setting}))
    with pytest.raises(ModelConfigError, match="adapter settings not merged here"):
        merge_lora(tmp_path, lambda name: reference_class())


def test_a_checkpoint_missing_weights_is_refused_not_left_random(folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    base = base_folder(folder)
    weights = load_file(str(base / "model.safetensors"))
    del weights["model.norm.weight"]
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text((base / "config.json").read_text())
    with pytest.raises(ModelConfigError, match="lacks 1 weights"):
        load(tmp_path)
