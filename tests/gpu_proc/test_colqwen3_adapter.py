"""ColQwen3Adapter through the device path against the remote code's recipe on transformers' classes
(tests/tiny_models/colqwen3.py: Qwen3-VL's inner model + the projection, pages through
Qwen2VLImageProcessor capped as the processor caps it, texts stripped and augmented).

Pages go as the frontend sends them (resized uint8 pixels with the recipe's prompt ids,
sie.frontend.colqwen3), texts as the recipe tokenizes them; the reference runs each item alone.
float32, atol 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sie.errors import ModelLoadFailed
from sie.frontend.colqwen3 import ColQwen3Recipe, capped_pages
from sie.frontend.tokenize import TextTokenizer, TokenizerCache
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.colqwen3 import ColQwen3Adapter
from sie.model_config import ModelConfigError, parse_model_config
from sie.page_config import PageConfigError
from tests import media_samples as samples
from tests.gpu_proc.test_colqwen2_adapter import (
    assert_matrices,
    page_request,
    pages_alone,
    query_request,
    vectors,
)
from tests.tiny_models.colqwen3 import (
    HUB_VISUAL_TOKENS,
    make_colqwen3,
    model_yaml_colqwen3,
    reference_images,
    reference_queries,
)

# Scaled up to the processor's least pixels, kept, and capped; RGBA and palette pages too.
IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.gif(30, 20), samples.jpeg(1400, 1100)]
SAME_SIZE = [samples.jpeg(300, 200, seed=1), samples.jpeg(300, 200, seed=2), samples.png_rgba(300, 200)]
QUERIES = [
    "the cat",
    "  padded at both ends \n",
    "What is the revenue of the company in 2023, by quarter?",
    "x",
]
COMPACT = 80  # visual tokens: under what the 640x480 page takes by default

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_colqwen3(tmp_path_factory.mktemp("colqwen3") / "hub")


def recipe_for(folder: Path, visual_tokens: int = HUB_VISUAL_TOKENS) -> ColQwen3Recipe:
    return ColQwen3Recipe.for_model(TextTokenizer(folder / "tokenizer.json", 4096), folder, visual_tokens)


@pytest.fixture(scope="module")
def recipe(folder: Path) -> ColQwen3Recipe:
    return recipe_for(folder)


@pytest.fixture(scope="module")
def adapter(folder: Path) -> ColQwen3Adapter:
    return load(folder)


def load(folder: Path) -> ColQwen3Adapter:
    config = parse_model_config(model_yaml_colqwen3("tiny/colqwen3", folder))
    loaded = load_adapter(config, folder, "cpu")
    assert isinstance(loaded, ColQwen3Adapter)
    return loaded


def test_page_vectors_match_the_reference(
    folder: Path, recipe: ColQwen3Recipe, adapter: ColQwen3Adapter
) -> None:
    got = pages_alone(adapter, recipe, IMAGES)
    assert_matrices(got, reference_images(folder, IMAGES))
    prompt = len(recipe.head) + len(recipe.tail)
    visual = [len(m) - prompt for m in got]
    assert visual[0] == 300 and 1200 < visual[3] <= HUB_VISUAL_TOKENS  # 640x480 kept; 1400x1100 capped
    assert visual[1] >= 64 and visual[2] >= 64  # small pages scaled up to the least pixels


def test_text_vectors_match_the_reference(
    folder: Path, recipe: ColQwen3Recipe, adapter: ColQwen3Adapter
) -> None:
    # Texts of different lengths share one right-padded batch here; the reference runs each alone.
    assert_matrices(vectors(adapter, query_request(recipe, QUERIES)), reference_queries(folder, QUERIES))


def test_the_compact_cap_resizes_pages_as_the_processor_capped_so(
    folder: Path, adapter: ColQwen3Adapter
) -> None:
    compact = recipe_for(folder, COMPACT)
    got = pages_alone(adapter, compact, IMAGES[:1] + IMAGES[3:])
    assert_matrices(got, reference_images(folder, IMAGES[:1] + IMAGES[3:], COMPACT))
    prompt = len(compact.head) + len(compact.tail)
    assert all(64 <= len(m) - prompt <= COMPACT for m in got)


def test_a_batch_of_same_size_pages_equals_each_alone(
    recipe: ColQwen3Recipe, adapter: ColQwen3Adapter
) -> None:
    singles = pages_alone(adapter, recipe, SAME_SIZE)
    order = [2, 0, 1, 2]
    assert_matrices(
        vectors(adapter, page_request(recipe, [SAME_SIZE[i] for i in order])), [singles[i] for i in order]
    )


def test_a_bare_qwen3_vl_checkpoint_loads_as_the_remote_code_loads_it(tmp_path: Path) -> None:
    folder = make_colqwen3(tmp_path / "legacy", seed=1, legacy_names=True)
    recipe = recipe_for(folder)
    adapter = load(folder)
    got = pages_alone(adapter, recipe, IMAGES[:1]) + vectors(adapter, query_request(recipe, QUERIES[:1]))
    assert_matrices(got, reference_images(folder, IMAGES[:1]) + reference_queries(folder, QUERIES[:1]))


def test_a_query_prefix_in_processor_config_is_used(tmp_path: Path, folder: Path) -> None:
    import shutil

    copy = Path(shutil.copytree(folder, tmp_path / "prefixed"))
    config = json.loads((copy / "processor_config.json").read_text())
    (copy / "processor_config.json").write_text(json.dumps({**config, "query_prefix": "Query: "}))
    encoded = recipe_for(copy).queries([" cats "])
    want = recipe_for(folder).tokenizer.encode(f"Query: cats{'<|endoftext|>' * 10}").ids
    assert encoded.input_ids.tolist() == want


def test_a_checkpoint_of_another_model_or_missing_weights_is_refused(folder: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    other = tmp_path / "other"
    other.mkdir()
    raw = json.loads((folder / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**raw, "model_type": "qwen2_vl"}))
    with pytest.raises(ModelConfigError, match="not ColQwen3's"):
        load(other)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["vlm.model.language_model.norm.weight"]
    save_file(weights, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelConfigError, match="lacks 1 weights"):
        load(tmp_path)


def test_a_cap_below_the_least_page_fails_the_load(folder: Path) -> None:
    with pytest.raises(PageConfigError, match="allows fewer pixels"):
        capped_pages(folder, 63)  # the processor's least: 65,536 pixels, 64 tokens of 32 x 32
    for bad in ("768", 0, True):
        with pytest.raises(PageConfigError, match="not a positive integer"):
            capped_pages(folder, bad)
    config = parse_model_config(model_yaml_colqwen3("tiny/colqwen3", folder))
    with pytest.raises(ModelLoadFailed, match=r"'tiny/colqwen3' failed to load: .*allows fewer pixels"):
        TokenizerCache().derived(config, "pages", lambda tokens: ColQwen3Recipe.for_model(tokens, folder, 8))
    assert capped_pages(folder, 64).max_pixels == 65536
    assert np.isclose(capped_pages(folder, HUB_VISUAL_TOKENS).max_pixels, 1280 * 1024)
