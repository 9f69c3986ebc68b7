"""SIE's Qwen3-VL embedding and reranker YAMLs read as our families; `inputs.video` is a note."""

from __future__ import annotations

from typing import Any

import pytest

from sie.model_config import ModelConfig, ModelConfigError, load_model_file, parse_model_config
from sie.sie_yaml import translate
from tests.shared_catalog_files import SIE_CATALOG

EMBEDDING = "sie_server.adapters.qwen3_vl_embedding:Qwen3VLEmbeddingAdapter"
RERANKER = "sie_server.adapters.qwen3_vl_reranker.adapter:Qwen3VLRerankerAdapter"


def _sie(
    path: str, inputs: dict[str, bool], tasks: dict[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    return {
        "sie_id": "Qwen/model",
        "hf_id": "Qwen/model",
        "inputs": inputs,
        "tasks": {"encode": None, "score": None, "extract": None, **tasks},
        "max_sequence_length": 32768,
        "profiles": {"default": {"max_batch_tokens": 4096, "adapter_path": path, "adapter_options": options}},
    }


def _config(raw: dict[str, Any]) -> ModelConfig:
    return parse_model_config(translate(raw, "test.yaml"), "test.yaml")


def test_an_embedder_whose_yaml_allows_video_is_served_for_text_and_images() -> None:
    raw = _sie(
        EMBEDDING,
        {"text": True, "image": True, "audio": False, "video": True},
        {"encode": {"dense": {"dim": 2048}, "sparse": None, "multivector": None}},
        {"loadtime": {}, "runtime": {"normalize": True, "pooling": "last", "default_instruction": "Be it."}},
    )
    config = _config(raw)
    runtime = config.profile().adapter_options.runtime
    assert config.family == "qwen3_vl_embedding" and config.input_kinds() == ("text", "image")
    assert (runtime.pooling, runtime.normalize, runtime.default_instruction) == ("last", True, "Be it.")
    assert config.output_types() == ["dense"] and not config.supports_score()
    assert any(note.startswith("inputs.video: video inputs are not served") for note in config.notes)


def test_document_inputs_are_still_refused_by_name() -> None:
    raw = _sie(EMBEDDING, {"text": True, "document": True}, {"encode": {"dense": {"dim": 8}}}, {})
    with pytest.raises(ModelConfigError, match=r"inputs\.document"):
        _config(raw)


def test_a_rerankers_base_processor_is_noted() -> None:
    loadtime = {
        "base_processor_model": "Qwen/Qwen3-VL-2B-Instruct",
        "base_processor_revision": "abc",
        "default_instruction": "Retrieve it.",
    }
    raw = _sie(RERANKER, {"text": True, "image": True}, {"score": {}}, {"loadtime": loadtime, "runtime": {}})
    config = _config(raw)
    profile = config.profile()
    assert config.family == "qwen3_vl_reranker" and config.supports_score()
    assert profile.adapter_options.loadtime == {}
    assert profile.adapter_options.runtime.default_instruction == "Retrieve it."
    noted = [n for n in config.notes if "base_processor" in n]
    assert len(noted) == 2 and all("has no effect" in n for n in noted)


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("Qwen__Qwen3-VL-Embedding-2B.yaml", "qwen3_vl_embedding"),
        ("Qwen__Qwen3-VL-Reranker-2B.yaml", "qwen3_vl_reranker"),
    ],
)
def test_sies_catalog_files_are_served(name: str, family: str) -> None:
    path = SIE_CATALOG / name
    if not path.is_file():
        pytest.skip("no SIE catalog data")
    config = load_model_file(path)
    assert config.family == family and config.input_kinds() == ("text", "image")
