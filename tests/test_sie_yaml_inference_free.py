"""SIE's YAML for OpenSearch's inference-free sparse encoders, and SPLADE's runtime.max_seq_length."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sie.model_config import ModelConfig, ModelConfigError, parse_model_config
from sie.sie_yaml import translate

SIE_CATALOG = Path(__file__).resolve().parents[2] / "shared" / "sie-catalog" / "models"
SERVED = ("doc-v2-distill", "doc-v2-mini", "doc-v3-distill")
PREFIX = "opensearch-project__opensearch-neural-sparse-encoding-"


def read(file_name: str) -> ModelConfig:
    path = SIE_CATALOG / file_name
    if not path.is_file():
        pytest.skip("no SIE catalog data")
    return parse_model_config(translate(yaml.safe_load(path.read_text()), path.name), path.name)


@pytest.mark.parametrize("name", SERVED)
def test_doc_encoders_are_served_by_the_splade_family(name: str) -> None:
    config = read(f"{PREFIX}{name}.yaml")
    assert config.family == "splade" and config.output_types() == ["sparse"]
    assert config.tasks.encode is not None and config.tasks.encode.sparse is not None
    assert config.tasks.encode.sparse.dim == 30522 and config.max_sequence_length == 512


def test_doc_v3_gte_is_refused_by_name() -> None:
    with pytest.raises(ModelConfigError, match="GTESparseFlashAdapter"):
        read(f"{PREFIX}doc-v3-gte.yaml")


def test_splade_runtime_max_seq_length_is_honoured() -> None:
    config = read("prithivida__Splade_PP_en_v2.yaml")
    assert config.family == "splade" and config.max_sequence_length == 512
    assert config.profile().adapter_options.runtime.max_seq_length == 128
    raw = yaml.safe_load((SIE_CATALOG / "prithivida__Splade_PP_en_v2.yaml").read_text())
    raw["profiles"]["default"]["adapter_options"]["runtime"]["max_seq_length"] = 0
    with pytest.raises(ModelConfigError, match="max_seq_length 0"):
        parse_model_config(translate(raw, "bad.yaml"), "bad.yaml")
