"""SIE's DonutAdapter YAML, read as it is: its catalog files load, its options honoured or refused."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sie.model_config import ModelConfigError, parse_model_config
from sie.sie_yaml import translate
from tests.shared_catalog_files import SIE_CATALOG

TASKS = {
    "naver-clova-ix/donut-base-finetuned-cord-v2": "<s_cord-v2>",
    "naver-clova-ix/donut-base-finetuned-docvqa": "<s_docvqa>",
}
ADAPTER = "sie_server.adapters.donut:DonutAdapter"


def _model(runtime: dict[str, Any], loadtime: dict[str, Any] | None = None) -> dict[str, Any]:
    options = {"loadtime": loadtime or {}, "runtime": runtime}
    return {
        "sie_id": "org/donut",
        "hf_id": "org/donut",
        "inputs": {"text": False, "image": True},
        "tasks": {"encode": None, "score": None, "extract": {}},
        "profiles": {"default": {"adapter_path": ADAPTER, "adapter_options": options}},
    }


@pytest.mark.skipif(not SIE_CATALOG.is_dir(), reason="no SIE catalog data")
@pytest.mark.parametrize("sie_id", sorted(TASKS))
def test_sie_catalog_files_are_served(sie_id: str) -> None:
    raw = yaml.safe_load((SIE_CATALOG / f"{sie_id.replace('/', '__')}.yaml").read_text())
    config = parse_model_config(translate(raw, sie_id))
    assert config.family == "donut" and config.supports_extract() and config.input_kinds() == ("image",)
    runtime = config.profile().adapter_options.runtime
    assert (runtime.task, runtime.max_new_tokens, runtime.num_beams) == (TASKS[sie_id], 512, 1)


def test_options_are_honoured_or_refused_by_name() -> None:
    config = parse_model_config(translate(_model({"task": "<s_rvlcdip>", "max_new_tokens": 8}), "x"))
    assert config.profile().adapter_options.runtime.task == "<s_rvlcdip>"
    with pytest.raises(ModelConfigError, match=r"num_beams 4: Donut decodes greedily"):
        translate(_model({"num_beams": 4}), "x")
    with pytest.raises(ModelConfigError, match=r"runtime\.temperature"):
        translate(_model({"temperature": 0.5}), "x")
    with pytest.raises(ModelConfigError, match=r"loadtime\.default_prompt"):
        translate(_model({}, {"default_prompt": "<s_cord-v2>"}), "x")


def test_sie_load_time_defaults_apply_unless_runtime_says_otherwise() -> None:
    loadtime = {"default_task": "<s_docvqa>", "max_new_tokens": 64, "attn_implementation": "sdpa"}
    config = parse_model_config(translate(_model({"max_new_tokens": 128}, loadtime), "x"))
    runtime = config.profile().adapter_options.runtime
    assert (runtime.task, runtime.max_new_tokens) == ("<s_docvqa>", 128)
    assert config.profile().adapter_options.loadtime == {}
    with pytest.raises(ModelConfigError, match="Donut decodes greedily"):
        translate(_model({}, {"num_beams": 2}), "x")
