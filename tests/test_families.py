"""The family registry: every spec points at real code, and agrees with the model YAMLs it serves."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from sie.catalog import BUILTIN_MODELS_DIR
from sie.families import FAMILIES, Family, UnknownFamily, family_of
from sie.media_config import ImageKind
from sie.model_config import ModelConfig, load_model_file, parse_model_config
from tests.tiny_models.clip import model_yaml_clip
from tests.tiny_models.colbert import model_yaml_colbert
from tests.tiny_models.colpali import model_yaml_colpali
from tests.tiny_models.colqwen2 import model_yaml_colqwen2
from tests.tiny_models.colqwen3 import model_yaml_colqwen3
from tests.tiny_models.colsmol import model_yaml_colsmol
from tests.tiny_models.context_pruner import model_yaml_context_pruner
from tests.tiny_models.cross_encoder import model_yaml_cross_encoder
from tests.tiny_models.dense import model_yaml_dense
from tests.tiny_models.donut import model_yaml_donut
from tests.tiny_models.fake import model_yaml_fake
from tests.tiny_models.florence2 import model_yaml_florence2
from tests.tiny_models.gliclass import model_yaml_gliclass
from tests.tiny_models.gliformer import model_yaml_gliformer
from tests.tiny_models.gliner import model_yaml_gliner
from tests.tiny_models.gliner2 import model_yaml_gliner2, model_yaml_gliner2_decide
from tests.tiny_models.gliner_bi import model_yaml_gliner_bi
from tests.tiny_models.gliner_union import model_yaml_gliner_union
from tests.tiny_models.glirel import model_yaml_glirel
from tests.tiny_models.glm_ocr import model_yaml_glm_ocr
from tests.tiny_models.grounding_dino import model_yaml_grounding_dino
from tests.tiny_models.hybrid import model_yaml_hybrid
from tests.tiny_models.laya import model_yaml_laya
from tests.tiny_models.lighton_ocr import model_yaml_lighton_ocr
from tests.tiny_models.lighton_ocr3 import model_yaml_lighton_ocr3
from tests.tiny_models.llm_reranker import model_yaml_llm_reranker
from tests.tiny_models.mineru_vl import model_yaml_mineru_vl
from tests.tiny_models.nli import model_yaml_nli
from tests.tiny_models.owlv2 import model_yaml_owlv2
from tests.tiny_models.paddleocr_vl import model_yaml_paddleocr_vl
from tests.tiny_models.parakeet import model_yaml_parakeet
from tests.tiny_models.privacy_filter import model_yaml_privacy_filter
from tests.tiny_models.qwen3_vl import model_yaml_qwen3_vl_embedding, model_yaml_qwen3_vl_reranker
from tests.tiny_models.splade import model_yaml_splade
from tests.tiny_models.token_classification import model_yaml_token_classification
from tests.tiny_models.whisper import model_yaml_whisper

ROOT = Path(__file__).parents[1]
FAMILIES_DIR = ROOT / "sie" / "families"
NOWHERE = Path("/nonexistent")
# The YAMLs the tests' tiny reference models are served with: one per family at least.
TINY_MODEL_YAMLS = [
    model_yaml_dense("tiny/dense", NOWHERE),
    model_yaml_splade("tiny/splade", NOWHERE),
    model_yaml_colbert("tiny/colbert", NOWHERE),
    model_yaml_colpali("tiny/colpali", NOWHERE),
    model_yaml_colqwen2("tiny/colqwen2", NOWHERE),
    model_yaml_colqwen3("tiny/colqwen3", NOWHERE),
    model_yaml_colsmol("tiny/colsmol", NOWHERE),
    model_yaml_hybrid("tiny/hybrid", NOWHERE),
    model_yaml_cross_encoder("tiny/cross-encoder", NOWHERE),
    model_yaml_context_pruner("tiny/context-pruner", NOWHERE),
    model_yaml_llm_reranker("tiny/llm-reranker", NOWHERE),
    model_yaml_nli("tiny/nli", NOWHERE),
    model_yaml_token_classification("tiny/ner", NOWHERE),
    model_yaml_privacy_filter("tiny/privacy-filter", NOWHERE),
    model_yaml_gliner("tiny/gliner", NOWHERE),
    model_yaml_gliner_bi("tiny/gliner-bi", NOWHERE),
    model_yaml_gliclass("tiny/gliclass", NOWHERE),
    model_yaml_gliner2("tiny/gliner2", NOWHERE),
    model_yaml_gliner2_decide("tiny/gliner2-decide", NOWHERE),
    model_yaml_gliner_union("tiny/gliner-union", NOWHERE),
    model_yaml_glirel("tiny/glirel", NOWHERE),
    model_yaml_gliformer("tiny/gliformer", NOWHERE),
    model_yaml_laya("tiny/laya", NOWHERE),
    model_yaml_clip("tiny/clip", NOWHERE),
    model_yaml_owlv2("tiny/owlv2", NOWHERE),
    model_yaml_grounding_dino("tiny/grounding-dino", NOWHERE),
    model_yaml_whisper("tiny/whisper", NOWHERE),
    model_yaml_parakeet("tiny/parakeet", NOWHERE),
    model_yaml_florence2("tiny/florence2", NOWHERE),
    model_yaml_lighton_ocr("tiny/lighton-ocr", NOWHERE),
    model_yaml_lighton_ocr3("tiny/lighton-ocr3", NOWHERE),
    model_yaml_glm_ocr("tiny/glm-ocr", NOWHERE),
    model_yaml_paddleocr_vl("tiny/paddleocr-vl", NOWHERE),
    model_yaml_mineru_vl("tiny/mineru-vl", NOWHERE),
    model_yaml_qwen3_vl_embedding("tiny/qwen3-vl-embedding", NOWHERE),
    model_yaml_qwen3_vl_reranker("tiny/qwen3-vl-reranker", NOWHERE),
    model_yaml_donut("tiny/donut", NOWHERE),
    model_yaml_fake("tiny/fake", NOWHERE),
]


def _served_configs() -> list[ModelConfig]:
    builtin = [load_model_file(path) for path in sorted(BUILTIN_MODELS_DIR.glob("*.yaml"))]
    return builtin + [parse_model_config(raw) for raw in TINY_MODEL_YAMLS]


def test_every_spec_module_is_registered_under_its_own_name() -> None:
    spec_modules = {p.stem for p in FAMILIES_DIR.glob("*.py")} - {"__init__", "spec"}
    assert spec_modules == set(FAMILIES)
    assert all(name == family.name for name, family in FAMILIES.items())


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_adapter_target_is_a_class_with_a_load_classmethod(name: str) -> None:
    adapter = family_of(name).adapter_class()
    assert inspect.isclass(adapter)
    assert isinstance(inspect.getattr_static(adapter, "load"), classmethod)
    assert callable(adapter.forward) and callable(adapter.close)


@pytest.mark.parametrize("name", sorted(n for n, f in FAMILIES.items() if f.serves_extract))
def test_extract_runner_resolves_to_a_coroutine_taking_a_job(name: str) -> None:
    runner = family_of(name).extract_function()
    assert inspect.iscoroutinefunction(runner)
    assert list(inspect.signature(runner).parameters) == ["state", "target", "job"]


@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_spec_is_consistent(family: Family) -> None:
    assert family.inputs and set(family.inputs) <= {"text", "image", "audio"}
    if family.extract_needs_labels:
        assert family.serves_extract
    if family.score == "maxsim":  # MaxSim compares token matrices
        assert "multivector" in family.encodes
    if family.score_tokenization == "llm_prompt":  # a prompt per (query, item) pair
        assert family.score == "pairs"
    # An image family must know how to process images whose config names no processor.
    assert ("image" in family.inputs) == (family.media_kind is not None)
    assert family.media_kind is None or family.media_kind in get_args(ImageKind)
    assert family.encodes or family.score or family.serves_extract, "a family must serve something"


def test_a_family_without_extract_has_no_runner_to_resolve() -> None:
    with pytest.raises(ValueError, match="serves no extract"):
        family_of("dense").extract_function()


def test_unknown_family_is_a_clear_error() -> None:
    with pytest.raises(UnknownFamily, match=r"unknown adapter family 'nope' \(known: .*colbert.*dense"):
        family_of("nope")


def test_every_family_has_a_tiny_reference_model() -> None:
    assert {parse_model_config(raw).family for raw in TINY_MODEL_YAMLS} == set(FAMILIES)


@pytest.mark.parametrize("config", _served_configs(), ids=lambda c: c.sie_id)
def test_registry_serves_what_each_model_yaml_declares(config: ModelConfig) -> None:
    for profile in config.profiles.values():
        family = family_of(profile.adapter)
        assert set(config.output_types()) <= family.encodes
        if config.tasks.score is not None:
            assert config.supports_score()
        if config.tasks.extract is not None:
            assert family.serves_extract and config.supports_extract()
        declared: dict[str, Any] = {"image": config.inputs.image, "audio": config.inputs.audio}
        assert {kind for kind, wanted in declared.items() if wanted} <= set(family.inputs)
        assert config.input_kinds() == family.inputs


def test_model_config_capabilities_follow_the_registry() -> None:
    reranker = parse_model_config({"sie_id": "r", "tasks": {"score": {}}, "adapter": "cross_encoder"})
    dense_hybrid = parse_model_config(
        {"sie_id": "h", "tasks": {"encode": {"dense": {"dim": 4}}}, "adapter": "hybrid"}
    )
    unknown = parse_model_config({"sie_id": "u", "adapter": "not-a-family"})
    assert reranker.supports_score() and not reranker.supports_extract()
    assert not dense_hybrid.supports_score()  # MaxSim needs the multi-vector output declared
    # An unknown family passes parsing (its load fails later) and claims nothing beyond text.
    assert (unknown.supports_score(), unknown.supports_extract(), unknown.input_kinds()) == (
        False,
        False,
        ("text",),
    )


def _modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    return set(result.stdout.split())


def test_importing_the_registry_pulls_in_no_heavy_or_process_specific_module() -> None:
    loaded = _modules_after("import sie.families")
    assert "sie.families.dense" in loaded
    heavy = {"torch", "transformers", "numpy", "onnxruntime", "gliner", "starlette"}
    assert not heavy & {name.split(".")[0] for name in loaded}
    assert not {name for name in loaded if name.startswith(("sie.gpu_proc", "sie.frontend"))}


def test_a_dense_adapter_imports_no_other_familys_libraries() -> None:
    loaded = _modules_after("from sie.families import family_of\nfamily_of('dense').adapter_class()")
    assert "sie.gpu_proc.adapters.dense" in loaded
    assert not {"onnxruntime", "gliner"} & {name.split(".")[0] for name in loaded}
    assert "sie.gpu_proc.adapters.token_classification" not in loaded
