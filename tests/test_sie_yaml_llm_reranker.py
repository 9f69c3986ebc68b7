"""SIE's LLM reranker adapters read as the llm_reranker family: their options honoured or refused."""

from __future__ import annotations

from typing import Any

import pytest

from sie.model_config import ModelConfig, load_model_file, parse_model_config
from sie.sie_yaml import translate
from tests.shared_catalog_files import SIE_CATALOG

FLASH = "sie_server.adapters.qwen2_flash_cross_encoder.adapter:Qwen2FlashCrossEncoderAdapter"
NATIVE = "sie_server.adapters.native_causal_cross_encoder.adapter:NativeCausalCrossEncoderAdapter"


def _sie(
    loadtime: dict[str, Any], runtime: dict[str, Any] | None = None, path: str = FLASH
) -> dict[str, Any]:
    options = {"loadtime": loadtime, "runtime": runtime or {}}
    return {
        "sie_id": "org/reranker",
        "hf_id": "org/reranker",
        "tasks": {"encode": None, "score": {}, "extract": None},
        "max_sequence_length": 8192,
        "profiles": {"default": {"adapter_path": path, "adapter_options": options}},
    }


def _config(raw: dict[str, Any]) -> ModelConfig:
    return parse_model_config(translate(raw, "test.yaml"), "test.yaml")


def _catalog_file(name: str) -> ModelConfig:
    path = SIE_CATALOG / name
    if not path.is_file():
        pytest.skip("no SIE catalog data")
    return load_model_file(path)


def test_qwen3_reranker_file() -> None:
    config = _catalog_file("Qwen__Qwen3-Reranker-0.6B.yaml")
    assert set(config.profiles) == {"default", "fast"}
    for profile in config.profiles.values():
        assert profile.adapter == "llm_reranker"
        assert profile.adapter_options.loadtime == {
            "yes_token": "yes",
            "no_token": "no",
            "score_mode": "log_softmax",
        }
        runtime = profile.adapter_options.runtime
        assert runtime.input_format == "qwen3" and runtime.max_seq_length is None
        assert runtime.default_instruction == (
            "Given a web search query, retrieve relevant passages that answer the query"
        )
    tuned = {note.split("loadtime.")[1].split(" ")[0] for note in config.notes if "'fast'" in note}
    assert tuned == {"fused_kernels", "prefix_reuse", "prefix_cache_mb", "cuda_graphs", "cuda_graph_tokens"}
    assert config.supports_score() and config.max_sequence_length == 32768


def test_mxbai_and_zerank_files() -> None:
    mxbai = _catalog_file("mixedbread-ai__mxbai-rerank-base-v2.yaml").profile()
    assert mxbai.adapter == "llm_reranker" and mxbai.adapter_options.loadtime == {}
    assert mxbai.adapter_options.runtime.input_format is None  # SIE's default recipe, mxbai
    zerank = _catalog_file("zeroentropy__zerank-2-reranker.yaml").profile()
    assert zerank.adapter == "llm_reranker" and zerank.adapter_options.loadtime == {}
    assert zerank.adapter_options.runtime.input_format == "native"
    r3 = _catalog_file("tencent__R3-rerank-0.6b.yaml").profile().adapter_options.runtime
    assert r3.default_instruction == "Given a user request, retrieve the agent skill that solves it."


def test_lengths_honoured_as_the_prompt_limit() -> None:
    config = _config(_sie({"input_format": "qwen3", "max_seq_length": 1024}))
    assert config.profile().adapter_options.runtime.max_seq_length == 1024
    config = _config(_sie({}, {"max_seq_length": 512}))
    assert config.profile().adapter_options.runtime.max_seq_length == 512


@pytest.mark.parametrize(
    ("loadtime", "runtime", "reason"),
    [
        (
            {"score_mode": "sigmoid"},
            {},
            "loadtime.score_mode 'sigmoid' is not one of logit_diff, log_softmax",
        ),
        ({"input_format": "native"}, {}, "loadtime.input_format 'native' is not one of mxbai, qwen3"),
        ({"max_seq_length": 0}, {}, "max_seq_length 0 is not a positive integer"),
        ({}, {"max_seq_length": "long"}, "max_seq_length 'long' is not a positive integer"),
        ({"pooling_head": True}, {}, "loadtime.pooling_head is not supported for the llm_reranker family"),
        ({}, {"activation": "sigmoid"}, "runtime.activation is not supported for the llm_reranker family"),
    ],
)
def test_options_refused_by_name(loadtime: dict[str, Any], runtime: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match="profile 'default'") as caught:
        _config(_sie(loadtime, runtime))
    assert reason in str(caught.value)


def test_native_adapter_implies_its_recipe() -> None:
    config = _config(_sie({}, path=NATIVE))
    assert config.profile().adapter == "llm_reranker"
    assert config.profile().adapter_options.runtime.input_format == "native"
