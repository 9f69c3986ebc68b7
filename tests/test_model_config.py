from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sie.catalog import (
    BUILTIN_MODELS_DIR,
    DEFAULT_SPARSE_MODEL,
    Catalog,
    load_catalog,
    preload_names,
    read_models_dir,
)
from sie.model_config import ModelConfigError, parse_model_config, parse_yaml
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir, weights_present
from sie.settings import DEFAULT_MODEL
from tests.shared_catalog_files import SIE_CATALOG


def test_builtin_catalog_serves_minilm_from_its_package() -> None:
    catalog = load_catalog()
    config = catalog.get(DEFAULT_MODEL)
    assert config.dense_dim() == 384 and config.max_sequence_length == 256
    assert config.profile().adapter_options.runtime.pooling == "mean"
    assert (resolve_weights_dir(config) / "tokenizer.json").is_file()


# YAML 1.1's corners that a parser could read differently: implicit booleans and nulls, octal and
# sexagesimal numbers, floats without a dot, timestamps, anchors and merge keys, block scalars.
TRICKY_YAML = """
a: yes
b: Off
c: ~
d: 0o17
e: 017
f: 1:30
g: 1e3
h: .inf
i: 2026-11-27
j: &base {x: 1, y: [1, 2]}
k: {<<: *base, y: 3}
l: |
  two
  lines
m: >-
  folded
  text
n: "\\u00e9\\t"
o: !!str 12
"""


def test_yaml_reads_as_yaml_safe_load_reads_it() -> None:
    files = sorted(BUILTIN_MODELS_DIR.glob("*.yaml")) + sorted(SIE_CATALOG.glob("*.yaml"))
    assert len(files) > 100
    for text in [TRICKY_YAML, *(f.read_text() for f in files)]:
        assert parse_yaml(text) == yaml.safe_load(text)
    for bad in ["a: [1, 2", "a: b: c", "- x\ny: 1", "!!python/object:os.system x"]:
        with pytest.raises(yaml.YAMLError):
            yaml.safe_load(bad)
        with pytest.raises(yaml.YAMLError):
            parse_yaml(bad)


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


def _cached(hub: Path, hf_id: str, revision: str, files: dict[str, str]) -> Path:
    """A model laid out as huggingface_hub lays out its cache (blobs linked from the snapshot)."""
    repo = hub / ("models--" + hf_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for name, text in files.items():
        blob = repo / "blobs" / f"{abs(hash((revision, name)))}"
        blob.write_text(text)
        (snapshot / name).symlink_to(blob)
    return snapshot


def test_weights_at_the_pinned_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = tmp_path / "hub"
    pinned, newer = "a" * 40, "b" * 40
    old = _cached(hub, "org/name", pinned, {"config.json": "{}"})
    _cached(hub, "org/name", newer, {"config.json": "{}"})
    (hub / "models--org--name" / "refs").mkdir()
    (hub / "models--org--name" / "refs" / "main").write_text(newer)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = parse_model_config({"sie_id": "a", "hf_id": "org/name", "hf_revision": pinned})
    assert resolve_weights_dir(config) == old
    assert weights_present(config)
    absent = parse_model_config({"sie_id": "b", "hf_id": "org/name", "hf_revision": "c" * 40})
    assert not weights_present(absent)
    with pytest.raises(ModelConfigError, match="--hf-fallback") as raised:
        resolve_weights_dir(absent)
    assert str(hub) in str(raised.value) and "c" * 40 in str(raised.value)


def test_tokenizer_from_a_dependency_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SIE's hf_tokenizer_dependencies: a GLiNER checkpoint whose tokenizer lives in its backbone's repo.
    hub = tmp_path / "hub"
    _cached(hub, "org/gliner", "a" * 40, {"config.json": "{}"})
    backbone = _cached(hub, "org/backbone", "d" * 40, {"tokenizer.json": "{}"})
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    raw = {"sie_id": "g", "hf_id": "org/gliner", "hf_revision": "a" * 40}
    with pytest.raises(ModelConfigError, match=r"no tokenizer\.json"):
        resolve_tokenizer_file(parse_model_config(raw))
    config = parse_model_config({**raw, "hf_tokenizer_dependencies": {"org/backbone": "d" * 40}})
    assert resolve_tokenizer_file(config) == backbone / "tokenizer.json"


def test_preload_defaults_to_the_default_dense_and_sparse_models() -> None:
    catalog = load_catalog()
    assert preload_names(None, DEFAULT_MODEL, catalog) == [DEFAULT_MODEL, DEFAULT_SPARSE_MODEL]
    assert preload_names(None, "other/model", catalog) == [DEFAULT_SPARSE_MODEL]
    assert preload_names(None, DEFAULT_MODEL, load_catalog(include=[DEFAULT_MODEL])) == [DEFAULT_MODEL]
    with pytest.raises(ModelConfigError):
        preload_names(["nope"], DEFAULT_MODEL, catalog)
    assert preload_names([DEFAULT_MODEL], "x", Catalog(catalog.models)) == [DEFAULT_MODEL]


def test_a_profile_qualified_id_preloads_its_model_once() -> None:
    catalog = load_catalog()
    bge = catalog.get("BAAI/bge-m3")
    other = next(name for name in bge.profiles if name != bge.default_profile_name)
    names = [f"BAAI/bge-m3:{other}", "BAAI/bge-m3:default", DEFAULT_MODEL, "BAAI/bge-m3"]
    assert preload_names(names, DEFAULT_MODEL, catalog) == ["BAAI/bge-m3", DEFAULT_MODEL]
    assert catalog.named(f"BAAI/bge-m3:{other}") == "BAAI/bge-m3"
    for unknown in ("BAAI/bge-m3:nope", f"{DEFAULT_MODEL}:{other}", "BAAI/bge-m3:"):
        assert catalog.named(unknown) is None
        with pytest.raises(ModelConfigError, match="unknown models"):
            preload_names([unknown], DEFAULT_MODEL, catalog)


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


def test_a_fake_models_other_profiles_are_models_of_their_own(tmp_path: Path) -> None:
    fake = {
        "sie_id": "f",
        "profiles": {
            "default": {"adapter": "fake"},
            "slow": {"extends": "default", "adapter_options": {"loadtime": {"faults": {"slow_load_s": 1}}}},
        },
    }
    dense = {"sie_id": "d", "weights": {"path": "/x"}, "profiles": {"default": {}, "other": {}}}
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(fake))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(dense))
    models, unsupported = read_models_dir(tmp_path)
    by_id = {m.sie_id: m for m in models}
    assert sorted(by_id) == ["d", "f", "f:slow"] and not unsupported  # profiles of one loaded model
    assert list(by_id["f:slow"].profiles) == ["default"]
    assert by_id["f:slow"].profile().adapter_options.loadtime == {"faults": {"slow_load_s": 1}}
    assert set(by_id["f"].profiles) == {"default", "slow"}  # the base still takes options.profile
    assert by_id["f"].is_weightless and weights_present(by_id["f:slow"]) and not by_id["d"].is_weightless


def test_default_preload_skips_default_models_whose_weights_are_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIE's own directory names MiniLM by its Hub id; with an empty cache it is served on demand
    # (and fails then, with the reason), not preloaded, so the server still becomes ready.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "m.yaml").write_text(f"sie_id: {DEFAULT_MODEL}\nhf_id: {DEFAULT_MODEL}\n")
    catalog = load_catalog(tmp_path)
    assert preload_names(None, DEFAULT_MODEL, catalog) == []
    assert preload_names([DEFAULT_MODEL], DEFAULT_MODEL, catalog) == [DEFAULT_MODEL]  # asked for: tried
