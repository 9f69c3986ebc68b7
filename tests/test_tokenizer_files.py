"""Finding a model's tokenizer.json: its own, one converted from a slow tokenizer, a dependency's, or
(GLiREL) its encoder's; and the reasons given when there is none."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from sie.gpu_proc.tokenizer_conversion import convert_tokenizers
from sie.model_config import ModelConfigError, parse_model_config
from sie.model_location import folder_tokenizer_file, resolve_tokenizer_file, tokenizer_repositories
from sie.tokenizer_files import (
    OWN_DIR,
    conversion_key,
    converted_roots,
    describe_missing,
    find_tokenizer_json,
    slow_tokenizer_files,
)
from tests.tiny_models.slow_tokenizers import make_deberta_spm

ENCODER_ID = "org/deberta-v3-tiny"
ENCODER_REVISION = "e" * 40


@pytest.fixture(scope="module")
def spm_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_deberta_spm(tmp_path_factory.mktemp("spm"))


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache of this test's own, read offline."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


def cached(hub: Path, hf_id: str, revision: str, source: Path) -> Path:
    """`source`'s files as a snapshot of `hf_id` in the cache, `revision` its main branch."""
    repo = hub / ("models--" + hf_id.replace("/", "--"))
    snapshot = repo / "snapshots" / revision
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


def glirel_yaml(folder: Path, **extra: Any) -> dict[str, Any]:
    return {
        "sie_id": "t/glirel",
        "weights": {"path": str(folder)},
        "tasks": {"extract": {}},
        "adapter": "glirel",
        **extra,
    }


def glirel_checkpoint(folder: Path, encoder: str) -> Path:
    """A GLiREL checkpoint as published: its config naming the encoder, no tokenizer files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "glirel_config.json").write_text(json.dumps({"model_name": encoder, "max_len": 40}))
    return folder


def test_slow_tokenizers_are_recognised_only_with_their_config(tmp_path: Path) -> None:
    (tmp_path / "vocab.json").write_text("{}")
    assert slow_tokenizer_files(tmp_path) is None  # no tokenizer_config.json: not known to be one
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert slow_tokenizer_files(tmp_path) is None  # merges.txt missing
    (tmp_path / "merges.txt").write_text("")
    assert slow_tokenizer_files(tmp_path) == ("vocab.json", "merges.txt")
    (tmp_path / "spm.model").write_bytes(b"x")
    assert slow_tokenizer_files(tmp_path) == ("spm.model",)


def test_the_key_follows_the_files_and_names_the_repository(spm_folder: Path, tmp_path: Path) -> None:
    copy = shutil.copytree(spm_folder, tmp_path / "models--org--name" / "snapshots" / ("c" * 40))
    key = conversion_key(copy)
    assert key is not None and key.parent == Path("models--org--name")
    assert conversion_key(shutil.copytree(copy, tmp_path / "other")) == Path("other") / key.name
    config = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": True}))
    assert conversion_key(copy) != key
    assert conversion_key(tmp_path) is None


def test_lookup_prefers_the_folders_own_file(
    spm_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cache = tmp_path / "hub"
    assert find_tokenizer_json(spm_folder, cache) is None
    key = conversion_key(spm_folder)
    assert key is not None
    for root in reversed(converted_roots(cache)):  # the temporary root, then the cache's (first)
        (root / key).mkdir(parents=True)
        (root / key / "tokenizer.json").write_text("{}")
        assert find_tokenizer_json(spm_folder, cache) == root / key / "tokenizer.json"
    assert converted_roots(cache)[0] == cache / OWN_DIR
    own = shutil.copytree(spm_folder, tmp_path / "own")
    (own / "tokenizer.json").write_text("{}")
    assert find_tokenizer_json(own, cache) == own / "tokenizer.json"


def test_reasons_name_the_folder_and_what_is_missing(spm_folder: Path, tmp_path: Path) -> None:
    assert "spm.model" in describe_missing(spm_folder) and "not converted yet" in describe_missing(spm_folder)
    reason = describe_missing(tmp_path)
    assert str(tmp_path) in reason and "vocab.txt" in reason and "tokenizer_config.json" in reason
    with pytest.raises(ModelConfigError, match="no tokenizer"):
        folder_tokenizer_file(tmp_path)


def test_a_model_without_any_tokenizer_says_where_it_looked(tmp_path: Path, hub: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text("{}")
    cached(hub, ENCODER_ID, ENCODER_REVISION, bare)  # a dependency without a tokenizer either
    raw = {"sie_id": "t/bare", "weights": {"path": str(bare)}, "tasks": {"encode": {"dense": {"dim": 4}}}}
    config = parse_model_config({**raw, "hf_tokenizer_dependencies": {ENCODER_ID: ENCODER_REVISION}})
    convert_tokenizers(config, bare)  # nothing to convert, nothing fails
    with pytest.raises(ModelConfigError) as raised:
        resolve_tokenizer_file(config)
    message = str(raised.value)
    assert "t/bare" in message and str(bare) in message and "models--org--deberta-v3-tiny" in message


def test_a_dependencys_slow_tokenizer_is_found_once_converted(
    spm_folder: Path, tmp_path: Path, hub: Path
) -> None:
    snapshot = cached(hub, ENCODER_ID, ENCODER_REVISION, spm_folder)
    folder = tmp_path / "gliner"
    folder.mkdir()
    config = parse_model_config(
        {
            "sie_id": "t/gliner",
            "weights": {"path": str(folder)},
            "hf_tokenizer_dependencies": {ENCODER_ID: ENCODER_REVISION},
            "tasks": {"extract": {}},
            "adapter": "gliner",
        }
    )
    with pytest.raises(ModelConfigError, match="not converted yet"):
        resolve_tokenizer_file(config)
    convert_tokenizers(config, folder)
    found = resolve_tokenizer_file(config)
    assert found.is_relative_to(hub / OWN_DIR / "models--org--deberta-v3-tiny")
    assert (found.parent / "tokenizer_config.json").read_bytes() == (
        snapshot / "tokenizer_config.json"
    ).read_bytes()
    assert not (snapshot / "tokenizer.json").exists()  # the snapshot itself is never written to


def test_glirel_reads_the_tokenizer_of_the_encoder_its_config_names(
    spm_folder: Path, tmp_path: Path, hub: Path
) -> None:
    checkpoint = glirel_checkpoint(tmp_path / "glirel", ENCODER_ID)
    config = parse_model_config(glirel_yaml(checkpoint))
    assert tokenizer_repositories(config, checkpoint) == {ENCODER_ID: None}
    # Not in the cache, offline: the reason names the encoder, the cache and --hf-fallback.
    with pytest.raises(ModelConfigError) as raised:
        resolve_tokenizer_file(config)
    assert ENCODER_ID in str(raised.value) and str(hub) in str(raised.value)
    assert "--hf-fallback" in str(raised.value)
    convert_tokenizers(config, checkpoint)  # the device's load step: the encoder is missing, no error
    cached(hub, ENCODER_ID, ENCODER_REVISION, spm_folder)
    convert_tokenizers(config, checkpoint)
    assert resolve_tokenizer_file(config).is_relative_to(hub / OWN_DIR / "models--org--deberta-v3-tiny")
    # A revision pinned by the YAML is the one read.
    pinned = parse_model_config(glirel_yaml(checkpoint, hf_tokenizer_dependencies={ENCODER_ID: "f" * 40}))
    assert tokenizer_repositories(pinned, checkpoint) == {ENCODER_ID: "f" * 40}
    with pytest.raises(ModelConfigError, match="f" * 40):
        resolve_tokenizer_file(pinned)


def test_glirel_encoder_named_by_a_local_folder(spm_folder: Path, tmp_path: Path, hub: Path) -> None:
    checkpoint = glirel_checkpoint(tmp_path / "glirel", str(spm_folder))
    config = parse_model_config(glirel_yaml(checkpoint))
    convert_tokenizers(config, checkpoint)
    assert resolve_tokenizer_file(config) == find_tokenizer_json(spm_folder, hub)
    (checkpoint / "glirel_config.json").write_text("{}")
    with pytest.raises(ModelConfigError, match="model_name"):
        tokenizer_repositories(config, checkpoint)
