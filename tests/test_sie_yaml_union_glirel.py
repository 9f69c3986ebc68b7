"""SIE's GLiNERUnionAdapter and GLiRELAdapter YAML, read as it is: their catalog files load, their
options honoured or refused."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sie.gliner_union import UNION_OPTIONS, parse_members, union_options
from sie.model_config import ModelConfigError, parse_model_config
from sie.sie_yaml import translate
from tests.shared_catalog_files import SIE_CATALOG

UNION = "sie_server.adapters.gliner_union.adapter:GLiNERUnionAdapter"
NUNER = {"model": "numind/NuNER_Zero", "revision": "c90187673f464518dca09f41689184ed6976242c"}


def _model(adapter: str, loadtime: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    options = {"loadtime": loadtime, "runtime": runtime}
    return {
        "sie_id": "org/m",
        "hf_id": "org/m",
        "tasks": {"encode": None, "score": None, "extract": {}},
        "profiles": {"default": {"adapter_path": adapter, "adapter_options": options}},
    }


def _catalog_file(sie_id: str) -> dict[str, Any]:
    if not SIE_CATALOG.is_dir():
        pytest.skip("no SIE catalog data")
    raw: dict[str, Any] = yaml.safe_load((SIE_CATALOG / f"{sie_id.replace('/', '__')}.yaml").read_text())
    return raw


def test_pii_redact_is_a_union_of_its_two_models() -> None:
    config = parse_model_config(translate(_catalog_file("superlinked/pii-redact"), "pii"))
    assert config.family == "gliner_union" and config.supports_extract()
    assert config.hf_id == "urchade/gliner_multi_pii-v1"  # the first member
    (member,) = parse_members(config.profile().adapter_options.loadtime["members"])
    assert (member.model, member.revision, member.merge_adjacent_entities) == (*NUNER.values(), True)
    runtime = config.profile().adapter_options.runtime
    options = union_options({key: getattr(runtime, key) for key in UNION_OPTIONS})
    assert (options.score_floor, options.window_words, options.window_overlap) == (0.6, 300, 50)
    assert options.propagate_label == "person" and len(options.default_labels) == 36


def test_glirel_large_is_served() -> None:
    config = parse_model_config(translate(_catalog_file("jackboyla/glirel-large-v0"), "glirel"))
    assert config.family == "glirel" and config.supports_extract()
    assert config.profile().adapter_options.runtime.threshold == 0.1


@pytest.mark.parametrize(
    ("loadtime", "runtime", "fragment"),
    [
        ({}, {}, r"loadtime\.members"),  # the adapter cannot load without them: refused at load, not here
        ({"members": []}, {}, r"loadtime\.members"),
        ({"members": [{"model": "numind/NuNER_Zero", "revision": "main"}]}, {}, "full commit SHA"),
        ({"members": [{**NUNER, "options": {"max_width": 1}}]}, {}, "unsupported option"),
        ({"members": [NUNER]}, {"window_words": 10, "window_overlap": 10}, "window_overlap"),
        ({"members": [NUNER]}, {"score_floor": 1.5}, "score_floor"),
        ({"members": [NUNER]}, {"flat_ner": False}, r"runtime\.flat_ner"),
    ],
)
def test_union_options_are_checked(loadtime: dict[str, Any], runtime: dict[str, Any], fragment: str) -> None:
    raw = _model(UNION, loadtime, runtime)
    if not loadtime:
        config = parse_model_config(translate(raw, "x"))  # our YAML reader takes it; the load refuses it
        with pytest.raises(ValueError, match="at least one other member"):
            parse_members(config.profile().adapter_options.loadtime.get("members"))
        return
    with pytest.raises(ModelConfigError, match=fragment):
        translate(raw, "x")


def test_glirel_options_are_refused_by_name() -> None:
    adapter = "sie_server.adapters.glirel:GLiRELAdapter"
    with pytest.raises(ModelConfigError, match=r"loadtime\.max_prompt_tokens"):
        translate(_model(adapter, {"max_prompt_tokens": 10}, {}), "x")
    with pytest.raises(ModelConfigError, match=r"runtime\.top_k"):
        translate(_model(adapter, {}, {"top_k": 3}), "x")
