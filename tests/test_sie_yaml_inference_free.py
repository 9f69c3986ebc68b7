"""SIE's YAML for OpenSearch's inference-free sparse encoders, and SPLADE's runtime.max_seq_length."""

from __future__ import annotations

import pytest
import yaml

from sie.model_config import ModelConfig, ModelConfigError, parse_model_config
from sie.sie_yaml import translate
from tests.shared_catalog_files import SIE_CATALOG

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


def test_doc_v3_gte_is_splade_with_the_gte_adapters_options() -> None:
    """SIE's GTE sparse adapter zeroes the special tokens' weights and, for a "v3" id, applies
    log1p twice; its trust_remote_code stays, but a "new" folder loads without running code."""
    config = read(f"{PREFIX}doc-v3-gte.yaml")
    assert config.family == "splade" and config.output_types() == ["sparse"]
    loadtime = dict(config.profile().adapter_options.loadtime)
    assert loadtime == {"trust_remote_code": True, "zero_special_tokens": True, "activation": "log1p_relu"}


def test_the_gte_adapter_keeps_one_log1p_for_other_ids() -> None:
    path = SIE_CATALOG / f"{PREFIX}doc-v3-gte.yaml"
    if not path.is_file():
        pytest.skip("no SIE catalog data")
    raw = yaml.safe_load(path.read_text())
    raw["sie_id"] = raw["hf_id"] = "example/gte-sparse-doc"
    loadtime = parse_model_config(translate(raw, "gte.yaml"), "gte.yaml").profile().adapter_options.loadtime
    assert "activation" not in loadtime and loadtime["zero_special_tokens"] is True


def test_splade_runtime_max_seq_length_is_honoured() -> None:
    config = read("prithivida__Splade_PP_en_v2.yaml")
    assert config.family == "splade" and config.max_sequence_length == 512
    assert config.profile().adapter_options.runtime.max_seq_length == 128
    raw = yaml.safe_load((SIE_CATALOG / "prithivida__Splade_PP_en_v2.yaml").read_text())
    raw["profiles"]["default"]["adapter_options"]["runtime"]["max_seq_length"] = 0
    with pytest.raises(ModelConfigError, match="max_seq_length 0"):
        parse_model_config(translate(raw, "bad.yaml"), "bad.yaml")
