"""Converting slow tokenizers on the device: written once, atomically, where the frontends look, and
a conversion that fails fails the model's load with the reason."""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from sie.gpu_proc import tokenizer_conversion
from sie.gpu_proc.tokenizer_conversion import _publish, convert_slow_tokenizer
from sie.gpu_proc.weights import local_weights
from sie.model_config import ModelConfigError, parse_model_config
from sie.tokenizer_files import OWN_DIR, conversion_key, converted_roots, find_tokenizer_json
from tests.tiny_models.slow_tokenizers import make_deberta_spm

pytest.importorskip("sentencepiece")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = make_deberta_spm(tmp_path_factory.mktemp("deberta"))
    (folder / "special_tokens_map.json").write_text(json.dumps({"mask_token": "[MASK]"}))
    return folder


def test_converted_once_beside_copies_of_the_tokenizer_files(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    path = convert_slow_tokenizer(source, cache)
    assert path is not None and path.parent.parent.parent == cache / OWN_DIR
    assert path == find_tokenizer_json(source, cache)
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    saved = Tokenizer.from_file(str(path))
    assert saved.truncation is None and saved.padding is None  # each family sets its own
    assert not list(path.parent.parent.glob(".*.tmp"))
    # Found again, never converted twice.
    monkeypatch.setattr(tokenizer_conversion, "_converted_json", lambda folder: pytest.fail("converted"))
    assert convert_slow_tokenizer(source, cache) == path


def test_a_folder_with_its_own_file_or_no_tokenizer_is_left_alone(source: Path, tmp_path: Path) -> None:
    own = shutil.copytree(source, tmp_path / "own")
    (own / "tokenizer.json").write_text("{}")
    assert convert_slow_tokenizer(own, tmp_path / "hub") == own / "tokenizer.json"
    assert convert_slow_tokenizer(tmp_path / "hub", tmp_path / "hub") is None
    assert not (tmp_path / "hub" / OWN_DIR).exists()


def test_processes_converting_at_once_publish_one_copy(source: Path, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    results: list[Path | None] = []
    threads = [
        threading.Thread(target=lambda: results.append(convert_slow_tokenizer(source, cache)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 4 and len(set(results)) == 1
    key = conversion_key(source)
    assert key is not None
    assert [p.name for p in (cache / OWN_DIR / key.parent).iterdir()] == [key.name]


def test_losing_the_race_keeps_the_winners_copy(source: Path, tmp_path: Path) -> None:
    target = tmp_path / "root" / "name" / "digest"
    assert _publish(target, source, '{"first": 1}') == target / "tokenizer.json"
    assert _publish(target, source, '{"second": 2}') == target / "tokenizer.json"
    assert json.loads((target / "tokenizer.json").read_text()) == {"first": 1}
    assert [p.name for p in target.parent.iterdir()] == ["digest"]


def test_a_read_only_cache_converts_into_the_temporary_directory(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    unwritable = tmp_path / "cache-file"
    unwritable.write_text("")  # nothing can be created under a file
    path = convert_slow_tokenizer(source, unwritable)
    assert path is not None and path.is_relative_to(converted_roots(unwritable)[1])
    assert find_tokenizer_json(source, unwritable) == path


def test_a_slow_tokenizer_that_cannot_be_converted_fails_the_load(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    broken = shutil.copytree(source, tmp_path / "broken")
    (broken / "spm.model").write_bytes(b"not a sentencepiece model")
    config = parse_model_config(
        {
            "sie_id": "t/broken",
            "weights": {"path": str(broken)},
            "tasks": {"extract": {}},
            "adapter": "gliner",
        }
    )
    with pytest.raises(ModelConfigError, match="could not be converted") as raised, local_weights(config):
        pytest.fail("the weights were handed over")
    assert str(broken) in str(raised.value) and "spm.model" in str(raised.value)
