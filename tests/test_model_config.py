from __future__ import annotations

from pathlib import Path

import pytest

from sie.model_config import (
    DEFAULT_SPARSE_MODEL,
    Catalog,
    ModelConfigError,
    load_catalog,
    parse_model_config,
    preload_names,
    resolve_weights_dir,
)
from sie.settings import DEFAULT_MODEL


def test_builtin_catalog_serves_minilm_from_its_package() -> None:
    catalog = load_catalog()
    config = catalog.get(DEFAULT_MODEL)
    assert config.dense_dim() == 384 and config.max_sequence_length == 256
    assert config.profile().adapter_options.runtime.pooling == "mean"
    assert (resolve_weights_dir(config) / "tokenizer.json").is_file()


def test_profiles_extend_each_other() -> None:
    config = parse_model_config(
        {
            "sie_id": "x/y",
            "profiles": {
                "default": {"max_batch_tokens": 100, "adapter_options": {"runtime": {"pooling": "cls"}}},
                "fast": {"extends": "default", "adapter_options": {"runtime": {"normalize": False}}},
            },
        }
    )
    fast = config.profile("fast")
    assert fast.max_batch_tokens == 100
    assert fast.adapter_options.runtime.pooling == "cls" and fast.adapter_options.runtime.normalize is False


def test_extends_cycle_and_unknown_keys_are_errors() -> None:
    with pytest.raises(ModelConfigError, match="cycle"):
        parse_model_config({"sie_id": "a", "profiles": {"p": {"extends": "q"}, "q": {"extends": "p"}}})
    with pytest.raises(ModelConfigError, match="bogus"):
        parse_model_config({"sie_id": "a", "bogus": 1})


def test_slots_are_stable_sorted_order(tmp_path: Path) -> None:
    for name in ("b/two", "a/one", "c/three"):
        (tmp_path / f"{name.replace('/', '__')}.yaml").write_text(f"sie_id: {name}\n")
    catalog = load_catalog(tmp_path)
    assert catalog.names() == ["a/one", "b/two", "c/three"]
    assert catalog.slot("c/three") == 2
    assert load_catalog(tmp_path, include=["c/three"]).names() == ["c/three"]
    with pytest.raises(ModelConfigError, match="unknown"):
        load_catalog(tmp_path, include=["nope"])


def test_weights_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = parse_model_config({"sie_id": "a", "weights": {"path": str(tmp_path)}})
    assert resolve_weights_dir(local) == tmp_path
    missing_package = parse_model_config({"sie_id": "a", "weights": {"package": "no_such_pkg_xyz"}})
    with pytest.raises(ModelConfigError, match="not installed"):
        resolve_weights_dir(missing_package)
    snapshot = tmp_path / "hub" / "models--org--name" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--org--name" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--name" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_weights_dir(parse_model_config({"sie_id": "a", "hf_id": "org/name"})) == snapshot


def test_preload_defaults_to_the_default_dense_and_sparse_models() -> None:
    catalog = load_catalog()
    assert preload_names(None, DEFAULT_MODEL, catalog) == [DEFAULT_MODEL, DEFAULT_SPARSE_MODEL]
    assert preload_names(None, "other/model", catalog) == [DEFAULT_SPARSE_MODEL]
    assert preload_names(None, DEFAULT_MODEL, load_catalog(include=[DEFAULT_MODEL])) == [DEFAULT_MODEL]
    with pytest.raises(ModelConfigError):
        preload_names(["nope"], DEFAULT_MODEL, catalog)
    assert preload_names([DEFAULT_MODEL], "x", Catalog(catalog.models)) == [DEFAULT_MODEL]


def test_top_level_adapter_is_a_single_default_profile() -> None:
    config = parse_model_config(
        {
            "sie_id": "x/rerank",
            "weights": {"path": "/tmp"},
            "tasks": {"score": {}},
            "adapter": "cross_encoder",
        }
    )
    assert config.family == "cross_encoder" and list(config.profiles) == ["default"]
    assert config.supports_score() and not config.supports_extract()
    with pytest.raises(ModelConfigError, match="not both"):
        parse_model_config({"sie_id": "x", "adapter": "dense", "profiles": {"default": {}}})


@pytest.mark.parametrize(
    ("family", "outputs", "scores", "extracts"),
    [
        ("dense", {"dense": {"dim": 4}}, False, False),
        ("colbert", {"multivector": {"dim": 4}}, True, False),
        ("hybrid", {"dense": {"dim": 4}, "sparse": {}}, False, False),
        ("gliner", None, False, True),
        ("nli_zero_shot", None, False, True),
        ("token_classification", None, False, True),
    ],
)
def test_family_capabilities(family: str, outputs: dict | None, scores: bool, extracts: bool) -> None:
    tasks = {"encode": outputs} if outputs else {"extract": {}}
    config = parse_model_config({"sie_id": "m", "tasks": tasks, "adapter": family})
    assert (config.supports_score(), config.supports_extract()) == (scores, extracts)
