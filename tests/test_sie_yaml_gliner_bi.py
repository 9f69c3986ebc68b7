"""SIE's GLiNERBiAdapter YAML, read as it is: its catalog files load, its options honoured or refused."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sie.model_config import ModelConfigError, parse_model_config
from sie.sie_yaml import translate
from tests.shared_catalog_files import SIE_CATALOG

IDS = [
    "knowledgator/gliner-bi-small-v2.0",
    "knowledgator/gliner-bi-base-v2.0",
    "knowledgator/gliner-bi-large-v2.0",
    "knowledgator/gliner-bi-edge-v2.0",
    "knowledgator/modern-gliner-bi-base-v1.0",
]
ADAPTER = "sie_server.adapters.gliner_bi:GLiNERBiAdapter"


def _model(loadtime: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    options = {"loadtime": loadtime, "runtime": runtime}
    return {
        "sie_id": "org/bi",
        "hf_id": "org/bi",
        "tasks": {"encode": None, "score": None, "extract": {}},
        "profiles": {"default": {"adapter_path": ADAPTER, "adapter_options": options}},
    }


@pytest.mark.skipif(not SIE_CATALOG.is_dir(), reason="no SIE catalog data")
@pytest.mark.parametrize("sie_id", IDS)
def test_sie_catalog_files_are_served(sie_id: str) -> None:
    raw = yaml.safe_load((SIE_CATALOG / f"{sie_id.replace('/', '__')}.yaml").read_text())
    config = parse_model_config(translate(raw, sie_id))
    assert config.family == "gliner_bi" and config.supports_extract()
    assert config.profile().adapter_options.runtime.threshold == 0.3
    if sie_id.startswith("knowledgator/modern"):
        assert config.profile().adapter_options.loadtime == {"max_len": 2048}
        # `sdpa` replaces the default's loadtime block whole (SIE's extends rule): gliner's own max_len.
        assert config.profile("sdpa").adapter_options.loadtime == {}
        assert any("attn_implementation" in note for note in config.notes)


def test_options_are_honoured_or_refused_by_name() -> None:
    config = parse_model_config(translate(_model({"max_len": 512}, {"precompute_labels": True}), "x"))
    assert config.profile().adapter_options.loadtime == {"max_len": 512}
    with pytest.raises(ModelConfigError, match="precompute_labels"):
        translate(_model({}, {"precompute_labels": False}), "x")
    with pytest.raises(ModelConfigError, match=r"loadtime\.max_len"):
        translate(_model({"max_len": "long"}, {}), "x")
    with pytest.raises(ModelConfigError, match=r"runtime\.flat_ner"):
        translate(_model({}, {"flat_ner": False}), "x")
