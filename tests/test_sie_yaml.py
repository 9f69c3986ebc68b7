"""SIE's model YAML read as it is: every field honoured, noted or refused by name."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sie.catalog import Catalog, load_catalog, read_models_dir
from sie.catalog_report import text_lines
from sie.families import FAMILIES
from sie.model_config import ModelConfigError, parse_model_config
from sie.sie_yaml import ADAPTERS, adapter_class, is_sie_format, translate

SIE_CATALOG = Path(__file__).resolve().parents[2] / "shared" / "sie-catalog" / "models"


def _sie(profiles: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "sie_id": "org/model",
        "hf_id": "org/model",
        "hf_revision": "0" * 40,
        "inputs": {"text": True, "image": False, "audio": False, "video": False},
        "tasks": {"encode": {"dense": {"dim": 8}, "sparse": None, "multivector": None}, "score": None},
        "max_sequence_length": 128,
        "profiles": profiles,
        **top,
    }


BERT = "sie_server.adapters.bert_flash:BertFlashAdapter"


def _config(raw: dict[str, Any]) -> Any:
    return parse_model_config(translate(raw, "test.yaml"), "test.yaml")


def test_told_apart_from_our_format() -> None:
    assert is_sie_format(_sie({"default": {"adapter_path": BERT, "max_batch_tokens": 1}}))
    assert not is_sie_format({"sie_id": "x", "profiles": {"default": {"adapter": "dense"}}})
    assert adapter_class(BERT) == "BertFlashAdapter"


def test_fields_honoured() -> None:
    runtime = {
        "pooling": "last_token",
        "normalize": False,
        "query_template": "Instruct: {instruction}\nQuery:{text}",
        "default_instruction": "Find it",
    }
    raw = _sie(
        {
            "default": {
                "adapter_path": BERT,
                "max_batch_tokens": 4096,
                "compute_precision": "bfloat16",
                "adapter_options": {
                    "loadtime": {"append_eos": True, "causal": True, "config_kwargs": {"use_cache": False}},
                    "runtime": runtime,
                },
            }
        },
        hf_tokenizer_dependencies={"org/base": "1" * 40},
    )
    config = _config(raw)
    profile = config.profile()
    assert (config.family, profile.max_batch_tokens, profile.compute_precision) == ("dense", 4096, "bfloat16")
    assert profile.adapter_options.runtime.pooling == "last"
    assert profile.adapter_options.runtime.normalize is False
    assert profile.adapter_options.runtime.instruction_for(None, is_query=True) == "Find it"
    assert profile.adapter_options.loadtime == {"append_eos": True, "config_kwargs": {"use_cache": False}}
    assert config.hf_revision == "0" * 40
    assert config.hf_tokenizer_dependencies == {"org/base": "1" * 40}


def test_extends_replaces_option_blocks_whole_as_sie_does() -> None:
    # SIE: a child's non-empty runtime block replaces the parent's; scalars override one by one.
    raw = _sie(
        {
            "default": {
                "adapter_path": BERT,
                "max_batch_tokens": 4096,
                "adapter_options": {"runtime": {"pooling": "cls", "query_template": "q: {text}"}},
            },
            "plain": {
                "extends": "default",
                "max_batch_tokens": 512,
                "adapter_options": {"runtime": {"normalize": False}},
            },
            "same": {"extends": "default"},
        }
    )
    config = _config(raw)
    plain = config.profile("plain")
    assert plain.max_batch_tokens == 512
    assert plain.adapter_options.runtime.query_template is None  # replaced, not merged
    assert plain.adapter_options.runtime.pooling == "mean"  # our default: SIE's block said nothing
    same = config.profile("same")
    assert (same.max_batch_tokens, same.adapter_options.runtime.query_template) == (4096, "q: {text}")


def test_model_code_runs_only_where_the_yaml_or_sie_adapter_says() -> None:
    def loadtime(path: str, given: dict[str, Any]) -> dict[str, Any]:
        raw = _sie({"default": {"adapter_path": path, "adapter_options": {"loadtime": given}}})
        return dict(_config(raw).profile().adapter_options.loadtime)

    sentence_transformers = "sie_server.adapters.sentence_transformer:SentenceTransformerDenseAdapter"
    assert loadtime(BERT, {}) == {}
    assert loadtime(BERT, {"trust_remote_code": True}) == {"trust_remote_code": True}
    # SIE's sentence-transformers adapter trusts the model's code unless told not to, and so do we.
    assert loadtime(sentence_transformers, {}) == {"trust_remote_code": True}
    assert loadtime(sentence_transformers, {"trust_remote_code": False}) == {}


def test_engine_knobs_are_noted_not_ignored() -> None:
    loadtime = {"attention_backend": "triton", "cuda_graphs": "bucketed"}
    raw = _sie({"default": {"adapter_path": BERT, "adapter_options": {"loadtime": loadtime}}})
    notes = _config(raw).notes
    assert any("attention_backend" in note for note in notes)
    assert any("cuda_graphs" in note for note in notes)


@pytest.mark.parametrize(
    ("profile", "named"),
    [
        ({"adapter_path": "x.y:NemoColEmbedAdapter"}, "NemoColEmbedAdapter"),
        ({"adapter_path": "x.y:SomethingNewAdapter"}, "SomethingNewAdapter"),
        (
            {
                "adapter_path": BERT,
                "adapter_options": {"loadtime": {"forward_kwargs": {"output_attentions": True}}},
            },
            "forward_kwargs",
        ),
        ({"adapter_path": BERT, "adapter_options": {"runtime": {"pooling": "max"}}}, "pooling 'max'"),
        ({"adapter_path": BERT, "adapter_options": {"runtime": {"lora_id": "a/b"}}}, "lora_id"),
        ({"adapter_path": BERT, "adapter_options": {"loadtime": {"dense_dim": 4}}}, "dense_dim"),
        ({"adapter_path": BERT, "kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
    ],
)
def test_a_refused_default_profile_makes_the_model_unsupported(profile: dict[str, Any], named: str) -> None:
    with pytest.raises(ModelConfigError, match=named):
        translate(_sie({"default": profile}), "test.yaml")


def test_gliclass_classification_type_is_the_default_a_request_can_override() -> None:
    gliclass = "sie_server.adapters.gliclass:GLiClassAdapter"
    loadtime = {"classification_type": "single-label", "cuda_graphs": "bucketed", "modernbert_flash": True}
    raw = _sie(
        {
            "default": {
                "adapter_path": gliclass,
                "adapter_options": {"loadtime": loadtime, "runtime": {"threshold": 0.0}},
            },
            "multi-label": {
                "extends": "default",
                "adapter_options": {"runtime": {"classification_type": "multi-label", "threshold": 0.2}},
            },
        },
        tasks={"encode": None, "score": None, "extract": {}},
    )
    config = _config(raw)
    default, multi = (config.profiles[name].adapter_options.runtime for name in ("default", "multi-label"))
    assert config.profile().adapter == "gliclass" and config.supports_extract()
    assert (default.multi_label, default.threshold) == (False, 0.0)
    assert (multi.multi_label, multi.threshold) == (True, 0.2)
    assert any("modernbert_flash" in note for note in config.notes)
    raw["profiles"]["default"]["adapter_options"]["loadtime"]["classification_type"] = "multi"
    with pytest.raises(ModelConfigError, match="classification_type"):
        translate(raw, "test.yaml")


def test_a_refused_other_profile_is_left_out_with_its_reason() -> None:
    raw = _sie(
        {
            "default": {"adapter_path": BERT},
            "banking": {"extends": "default", "adapter_options": {"runtime": {"lora_id": "a/b"}}},
            "rerank": {"adapter_path": "x:BertFlashCrossEncoderAdapter"},
        }
    )
    config = _config(raw)
    assert set(config.profiles) == {"default"}
    assert "lora_id" in config.refused_profiles["banking"]
    assert "cross_encoder" in config.refused_profiles["rerank"]
    assert any("banking" in note for note in config.notes)


@pytest.mark.parametrize(
    "top",
    [
        {"tasks": {"generate": {"context_length": 8}}},
        {"inputs": {"text": True, "document": True}},
        {"weights_path_of_sie_future": "/x"},
    ],
)
def test_refused_top_level_fields(top: dict[str, Any]) -> None:
    with pytest.raises(ModelConfigError, match=next(iter(top)).split("_")[0]):
        translate(_sie({"default": {"adapter_path": BERT}}, **top), "test.yaml")


def test_colbert_loadtime_becomes_tokenization_and_muvera_defaults() -> None:
    loadtime = {
        "muvera_config": {
            "num_repetitions": 40,
            "num_simhash_projections": 6,
            "projection_dim": 8,
            "center_tokens": True,
        },
        "token_dim": 96,
        "query_max_length": 32,
        "query_prefix": "[unused0]",
        "doc_prefix": "[unused1]",
        "query_expansion": False,
        "doc_punctuation_skiplist": False,
        "skip_special_tokens": False,
    }
    colbert = "sie_server.adapters.colbert:ColBERTAdapter"
    raw = _sie(
        {
            "default": {
                "adapter_path": colbert,
                "adapter_options": {"loadtime": loadtime, "runtime": {"muvera": None}},
            },
            "muvera": {
                "extends": "default",
                "adapter_options": {
                    "runtime": {"muvera": {}, "output_types": ["dense"], "max_seq_length": 300}
                },
            },
        },
        tasks={"encode": {"multivector": {"dim": 96}}, "score": {}},
    )
    config = _config(raw)
    default = config.profile().adapter_options.runtime
    assert (default.query_prefix, default.document_prefix, default.query_length) == (
        "[unused0]",
        "[unused1]",
        32,
    )
    assert default.do_query_expansion is False and default.skiplist_words == []
    assert default.muvera is None
    assert default.muvera_config == loadtime["muvera_config"]  # what a request asking MUVERA gets
    muvera = config.profile("muvera").adapter_options.runtime
    assert muvera.muvera == {} and muvera.muvera_config == loadtime["muvera_config"]
    assert (muvera.output_types, muvera.document_length) == (["dense"], 300)
    wrong_dim = copy.deepcopy(raw)
    wrong_dim["tasks"]["encode"]["multivector"]["dim"] = 128
    with pytest.raises(ModelConfigError, match="token_dim"):
        translate(wrong_dim, "test.yaml")


def test_one_bad_file_never_stops_the_directory(tmp_path: Path) -> None:
    good = _sie({"default": {"adapter_path": BERT}})
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    (tmp_path / "cut.yaml").write_text("sie_id: org/cut\nprofiles: {default: {adapter_path: [")
    (tmp_path / "colembed.yaml").write_text(
        yaml.safe_dump(_sie({"default": {"adapter_path": "a.b:NemoColEmbedAdapter"}}, sie_id="org/colembed"))
    )
    (tmp_path / "twin.yaml").write_text(yaml.safe_dump(good))
    models, unsupported = read_models_dir(tmp_path)
    assert [m.sie_id for m in models] == ["org/model"]
    reasons = {u.sie_id: u.reason for u in unsupported}
    # A file that is not YAML at all is named after the file (SIE's `org__name.yaml` -> `org/name`).
    assert set(reasons) == {"cut", "org/colembed", "org/model"}
    assert "YAML" in reasons["cut"] and "ColEmbed" in reasons["org/colembed"]
    assert "already declared" in reasons["org/model"]
    catalog = load_catalog(tmp_path)
    assert catalog.names() == ["org/model"] and set(catalog.unsupported) == {"cut", "org/colembed"}
    assert text_lines(catalog)[-1] == "1 served, 2 unsupported, 3 in all"


def test_every_adapter_rule_names_a_family_we_have_or_a_reason() -> None:
    for name, rule in ADAPTERS.items():
        assert (rule.family in FAMILIES) if rule.family else rule.refusal, name


def _sie_catalog() -> Catalog:
    if not SIE_CATALOG.is_dir():
        pytest.skip("no SIE catalog data")
    return load_catalog(SIE_CATALOG)


def test_sie_catalog_reads_whole() -> None:
    # SIE 0.10.1's own directory: every file is read, and each one is served or has a named reason.
    catalog = _sie_catalog()
    variants = [name for name in catalog.names() if name.startswith("sie-fake:")]  # one file, 5 models
    assert (
        len(catalog) - len(variants) + len(catalog.unsupported)
        == len(list(SIE_CATALOG.glob("*.yaml")))
        == 213
    )
    assert len(catalog) >= 80
    for model_id in ("BAAI/bge-m3", "Qwen/Qwen3-Embedding-0.6B", "cross-encoder/ms-marco-MiniLM-L-6-v2"):
        assert model_id in catalog
    assert catalog.get("knowledgator/gliclass-small-v1.0").profile().adapter == "gliclass"
    assert "generation" in catalog.unsupported["Qwen/Qwen3-0.6B"].reason
    qwen = catalog.get("Qwen/Qwen3-Embedding-0.6B").profile().adapter_options.runtime
    assert qwen.pooling == "last"
    assert qwen.instruction_for(None, is_query=True) == (
        "Given a web search query, retrieve relevant passages that answer the query"
    )


def test_builtin_catalog_serves_what_sie_catalog_serves() -> None:
    # The built-in directory (written by scripts/write_builtin_catalog.py) knows every id that SIE's
    # directory, read as it is, serves here, with the same family, dims and templates.
    sie = _sie_catalog()
    builtin = load_catalog()
    assert not builtin.unsupported
    for model in sie.models:
        ours = builtin.get(model.sie_id)
        assert ours.family == model.family, model.sie_id
        assert ours.tasks.encode == model.tasks.encode, model.sie_id
        if ours.weights.package is None:  # the hand-written built-ins ship their weights in a package
            assert ours.hf_revision == model.hf_revision, model.sie_id
            assert ours.profile().adapter_options.runtime == model.profile().adapter_options.runtime, (
                model.sie_id
            )


def test_sie_fake_is_served_with_each_profile_a_model_of_its_own() -> None:
    catalog = _sie_catalog()
    base = catalog.get("sie-fake")
    assert base.family == "fake" and base.is_weightless and base.dense_dim() == 384
    assert set(base.profiles) == {"default", "small-a", "small-b", "slow-load", "oom-3rd"}
    assert any("tasks.generate" in note for note in base.notes)  # left aside, not a refusal
    oom = catalog.get("sie-fake:oom-3rd")
    assert set(oom.profiles) == {"default"}
    assert oom.profile().adapter_options.loadtime == {
        "memory_footprint_bytes": 67108864,
        "fault_key": "sie-fake:oom-3rd",
        "faults": {"oom_on_dispatch": 3},
    }
    assert catalog.get("sie-fake:slow-load").profile().adapter_options.loadtime["faults"] == {
        "slow_load_s": 5.0
    }


def test_package_backed_and_generate_stay_refused_for_real_models() -> None:
    with pytest.raises(ModelConfigError, match="package_backed"):
        translate(_sie({"default": {"adapter_path": BERT}}, package_backed=True), "test.yaml")
    fake = "sie_server.adapters.fake.adapter:FakeAdapter"
    loadtime = {"fault_key": "f", "synthetic_usage": True, "faults": {"slow_load_s": 1}}
    config = _config(
        _sie(
            {"default": {"adapter_path": fake, "adapter_options": {"loadtime": loadtime}}},
            package_backed=True,
        )
    )
    assert config.profile().adapter_options.loadtime == {"fault_key": "f", "faults": {"slow_load_s": 1}}
    assert any("synthetic_usage" in note for note in config.notes)


PYTORCH_EMBEDDING = "sie_server.adapters.pytorch_embedding:PyTorchEmbeddingAdapter"
COLBERT_ROTARY = "sie_server.adapters.colbert_rotary_flash:ColBERTRotaryFlashAdapter"
COLBERT_MODERNBERT = "sie_server.adapters.colbert_modernbert_flash.adapter:ColBERTModernBERTFlashAdapter"
MULTIVECTOR_TASKS = {"encode": {"dense": None, "sparse": None, "multivector": {"dim": 8}}, "score": {}}


def _profile_of(
    path: str, loadtime: dict[str, Any], runtime: dict[str, Any] | None = None, **top: Any
) -> Any:
    options = {"loadtime": loadtime, "runtime": runtime or {}}
    return _config(_sie({"default": {"adapter_path": path, "adapter_options": options}}, **top)).profile()


def test_a_non_causal_forward_is_a_bidirectional_decoder() -> None:
    # GritLM: SIE passes `is_causal=False` to the forward; here the dense adapter's `bidirectional`.
    for loadtime in ({"forward_kwargs": {"is_causal": False}}, {"causal": False}):
        profile = _profile_of(PYTORCH_EMBEDDING, loadtime)
        assert profile.adapter_options.loadtime == {"trust_remote_code": True, "bidirectional": True}
    assert _profile_of(BERT, {"causal": True}).adapter_options.loadtime == {}
    with pytest.raises(ModelConfigError, match="dense decoders only"):
        translate(
            _sie(
                {
                    "default": {
                        "adapter_path": COLBERT_ROTARY,
                        "adapter_options": {"loadtime": {"causal": False}},
                    }
                },
                tasks=MULTIVECTOR_TASKS,
            ),
            "test.yaml",
        )


def test_code_revision_pins_the_model_code_repository() -> None:
    loadtime = {"code_revision": "8" * 40, "token_dim": 8}
    profile = _profile_of(COLBERT_ROTARY, loadtime, tasks=MULTIVECTOR_TASKS)
    assert profile.adapter_options.loadtime == {"trust_remote_code": True, "code_revision": "8" * 40}


def test_colbert_loadtime_max_seq_length_is_the_document_length() -> None:
    def document_length(loadtime: dict[str, Any], runtime: dict[str, Any] | None = None) -> Any:
        profile = _profile_of(COLBERT_MODERNBERT, loadtime, runtime, tasks=MULTIVECTOR_TASKS)
        return profile.adapter_options.runtime.document_length

    assert document_length({"max_seq_length": 8192}) == 8192
    # SIE's ColBERT adapters: doc_max_length wins over max_seq_length, whichever comes first ...
    assert document_length({"max_seq_length": 8192, "doc_max_length": 180}) == 180
    assert document_length({"doc_max_length": 180, "max_seq_length": 8192}) == 180
    # ... and a profile's runtime max_seq_length over both.
    assert document_length({"max_seq_length": 8192}, {"max_seq_length": 300}) == 300
    with pytest.raises(ModelConfigError, match="max_seq_length"):
        document_length({"max_seq_length": 0})


def test_colbert_smve_config_and_an_smve_profile_of_sparse_outputs() -> None:
    loadtime = {"smve_config": {"width": 4096, "k": 8}, "token_dim": 8}
    raw = _sie(
        {
            "default": {"adapter_path": COLBERT_MODERNBERT, "adapter_options": {"loadtime": loadtime}},
            "smve": {
                "extends": "default",
                "adapter_options": {
                    "runtime": {
                        "output_types": ["sparse"],
                        "output_similarity": {"sparse": "dot"},
                        "smve": {},
                    }
                },
            },
        },
        tasks=MULTIVECTOR_TASKS,
    )
    config = _config(raw)
    default, smve = (config.profiles[name].adapter_options.runtime for name in ("default", "smve"))
    assert default.smve is None and default.smve_config == {"width": 4096, "k": 8}
    assert smve.smve == {} and smve.smve_config == {"width": 4096, "k": 8}
    assert smve.output_types == ["sparse"]
    no_smve = copy.deepcopy(raw)
    del no_smve["profiles"]["smve"]["adapter_options"]["runtime"]["smve"]
    # Sparse only from SMVE (the model itself has no sparse output): that profile alone is left out.
    left = _config(no_smve)
    assert "smve" not in left.profiles and "default" in left.profiles
    assert "output_types ['sparse'] are not outputs of the model" in left.refused_profiles["smve"]
    no_smve["profiles"]["default"]["adapter_options"]["runtime"] = {"output_types": ["sparse"]}
    with pytest.raises(ModelConfigError, match=r"profile 'default': output_types \['sparse'\]"):
        _config(no_smve)  # ... and a default profile so refused makes the model unsupported
    unknown = copy.deepcopy(raw)
    unknown["profiles"]["default"]["adapter_options"]["loadtime"]["smve_config"]["bandwidth"] = 2
    with pytest.raises(ModelConfigError, match="smve_config keys"):
        translate(unknown, "test.yaml")


@pytest.mark.parametrize(
    ("path", "options", "top", "named"),
    [
        (
            "sie_server.adapters.siglip.adapter:SiglipAdapter",
            {"loadtime": {"backend": "open_clip", "open_clip_model_id": "hf-hub:org/model"}},
            {},
            "OpenCLIP model",
        ),
        (PYTORCH_EMBEDDING, {"loadtime": {"use_model_encode": True}}, {}, "latent attention"),
        (PYTORCH_EMBEDDING, {}, {"hf_id": "Hyukkyu/nv-embed-v2"}, "NV-Embed"),
    ],
)
def test_refusals_name_what_is_missing(
    path: str, options: dict[str, Any], top: dict[str, Any], named: str
) -> None:
    with pytest.raises(ModelConfigError, match=named):
        translate(_sie({"default": {"adapter_path": path, "adapter_options": options}}, **top), "test.yaml")


def test_sie_catalog_serves_the_one_field_ids() -> None:
    catalog = _sie_catalog()
    jina = catalog.get("jinaai/jina-colbert-v2").profile().adapter_options
    assert jina.loadtime["code_revision"] == "845308d0fd72a8406a3e378450e1a09522790419"
    assert catalog.get("lightonai/mLateOn").profile().adapter_options.runtime.document_length == 8192
    iso = catalog.get("topk-io/Iso-ModernColBERT")
    assert iso.profile("smve").adapter_options.runtime.smve == {}
    assert iso.profile().adapter_options.runtime.smve_config == {"width": 65536, "k": 32}
    grit = catalog.get("GritLM/GritLM-7B").profile().adapter_options
    assert grit.loadtime["bidirectional"] is True and grit.runtime.pooling == "mean"
    relex = catalog.get("knowledgator/gliner-relex-large-v1.0")
    assert relex.family == "gliner" and relex.profile().adapter_options.runtime.relation_threshold == 0.7
    reasons = {
        "Marqo/marqo-fashionSigLIP": "open_clip",
        "Marqo/marqo-ecommerce-embeddings-B": "open_clip",
        "nvidia/NV-Embed-v2": "latent attention",
    }
    for model_id, named in reasons.items():
        assert named in catalog.unsupported[model_id].reason, model_id


def test_the_stablebridge_pruner_is_a_context_pruner_with_its_head_and_thresholds() -> None:
    pruner = "sie_server.adapters.stablebridge_pruner:StablebridgePrunerAdapter"
    loadtime = {
        "pruning_head_path": "sugiv/stablebridge-pruner-highlighter",
        "pruning_head_file": "best.pt",
        "hidden_size": 1024,
        "intermediate_size": 512,
        "dropout": 0.2,
    }
    raw = _sie(
        {
            "default": {
                "adapter_path": pruner,
                "adapter_options": {"loadtime": loadtime, "runtime": {"prune_threshold": 0.6}},
            },
            "aggressive": {
                "extends": "default",
                "adapter_options": {"runtime": {"prune_threshold": 0.4, "highlight_threshold": 0.8}},
            },
        },
        tasks={"encode": None, "score": {}, "extract": {}},
    )
    config = _config(raw)
    assert (config.family, config.supports_score(), config.supports_extract()) == (
        "context_pruner",
        True,
        True,
    )
    default, aggressive = config.profile().adapter_options, config.profile("aggressive").adapter_options
    assert default.loadtime == {k: v for k, v in loadtime.items() if k != "dropout"}
    assert (
        default.runtime.activation,
        default.runtime.prune_threshold,
        default.runtime.highlight_threshold,
    ) == (
        "sigmoid",
        0.6,
        None,
    )
    assert (aggressive.runtime.prune_threshold, aggressive.runtime.highlight_threshold) == (0.4, 0.8)
    assert any("loadtime.dropout has no effect" in note for note in config.notes)
    bad = copy.deepcopy(raw)
    bad["profiles"]["default"]["adapter_options"]["loadtime"]["pruning_head_path"] = 7
    with pytest.raises(ModelConfigError, match="pruning_head_path 7"):
        translate(bad, "test.yaml")


def test_openais_privacy_filter_is_a_privacy_filter_with_its_decoding_options() -> None:
    adapter = "sie_server.adapters.privacy_filter.adapter:PrivacyFilterAdapter"
    loadtime = {"checkpoint_subdir": "original", "trim_span_whitespace": False}
    raw = _sie(
        {"default": {"adapter_path": adapter, "adapter_options": {"loadtime": loadtime, "runtime": {}}}},
        tasks={"encode": None, "score": None, "extract": {}},
    )
    config = _config(raw)
    assert (config.family, config.supports_extract(), config.supports_score()) == (
        "privacy_filter",
        True,
        False,
    )
    assert config.profile().adapter_options.loadtime == loadtime
    for key, value, named in [
        ("checkpoint_subdir", "weights", "checkpoint_subdir 'weights'"),
        ("trim_span_whitespace", "yes", "trim_span_whitespace 'yes'"),
        ("viterbi_beam", 4, "loadtime.viterbi_beam"),
    ]:
        bad = copy.deepcopy(raw)
        bad["profiles"]["default"]["adapter_options"]["loadtime"] = {key: value}
        with pytest.raises(ModelConfigError, match=named):
            translate(bad, "test.yaml")


def test_glm_ocr_reads_its_default_prompt_from_both_of_sies_profiles() -> None:
    sglang = "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter"
    loadtime = {
        "mem_fraction_static": 0.85,
        "served_model_name": "zai-org/GLM-OCR",
        "default_prompt": "Read:",
    }
    profiles = {
        "default": {"adapter_path": sglang, "adapter_options": {"loadtime": loadtime, "runtime": {}}},
        "transformers": {
            "adapter_path": "sie_server.adapters.glm_ocr:GlmOcrAdapter",
            "adapter_options": {"loadtime": {}, "runtime": {"max_new_tokens": 8192, "num_beams": 1}},
        },
    }
    raw = _sie(profiles, tasks={"encode": None, "score": None, "extract": {}})
    raw.update(sie_id="zai-org/GLM-OCR", hf_id="zai-org/GLM-OCR")
    config = _config(raw)
    assert config.family == "glm_ocr"
    assert config.profile().adapter_options.loadtime == {"default_prompt": "Read:"}
    assert config.profile("transformers").adapter_options.runtime.max_new_tokens == 8192
    assert any("served_model_name is SIE's SGLang server setting" in note for note in config.notes)
    bad = copy.deepcopy(raw)
    bad["profiles"]["default"]["adapter_options"]["loadtime"]["default_prompt"] = ["Read:"]
    with pytest.raises(ModelConfigError, match="default_prompt"):
        translate(bad, "test.yaml")


def test_paddleocr_vl_reads_its_tasks_and_refuses_unknown_ones() -> None:
    sglang = "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter"
    loadtime = {
        "trust_remote_code": True,
        "processor_use_fast": False,
        "default_task": "table",
        "task_prompts": {"ocr": "Read:"},
        "task_labels": {"seal": "stamp"},
    }
    profiles = {
        "default": {
            "adapter_path": sglang,
            "adapter_options": {"loadtime": loadtime, "runtime": {"task": "chart"}},
        },
        "transformers": {"adapter_path": "sie_server.adapters.paddleocr_vl:PaddleOCRVLAdapter"},
    }
    raw = _sie(profiles, tasks={"encode": None, "score": None, "extract": {}})
    raw.update(sie_id="PaddlePaddle/PaddleOCR-VL-1.5", hf_id="PaddlePaddle/PaddleOCR-VL-1.5")
    config = _config(raw)
    assert (config.family, config.profile().adapter_options.runtime.task) == ("paddleocr_vl", "chart")
    kept = {k: v for k, v in loadtime.items() if k != "processor_use_fast"}
    assert config.profile().adapter_options.loadtime == kept
    assert any("processor_use_fast" in note for note in config.notes)
    for where, key, value, named in [
        ("loadtime", "default_task", "layout", "default_task 'layout'"),
        ("loadtime", "task_prompts", {"layout": "Layout:"}, "not tasks of"),
        ("loadtime", "task_labels", {"seal": 3}, "mapping of tasks"),
        ("runtime", "task", "layout", "runtime.task 'layout'"),
    ]:
        bad = copy.deepcopy(raw)
        bad["profiles"]["default"]["adapter_options"][where][key] = value
        with pytest.raises(ModelConfigError, match=named):
            translate(bad, "test.yaml")


def test_lighton_ocr_3_reads_its_sampling_and_its_instructions() -> None:
    native = "sie_server.adapters.lighton_ocr.adapter:LightOnOCR3Adapter"
    loadtime = {"max_new_tokens": 12288, "temperature": 0.1, "top_p": 1.0}
    loadtime |= {"chat_template_kwargs": {"enable_thinking": False}, "allowed_instructions": ["grounding"]}
    raw = _sie(
        {"default": {"adapter_path": native, "adapter_options": {"loadtime": loadtime, "runtime": {}}}},
        tasks={"encode": None, "score": None, "extract": {}},
    )
    config = _config(raw)
    assert (config.family, config.profile().adapter_options.loadtime) == ("lighton_ocr3", loadtime)
    for key, value, named in [
        ("temperature", 0, "temperature 0"),
        ("temperature", 10**400, "temperature"),
        ("top_p", 1.5, "top_p 1.5"),
        ("max_new_tokens", -1, "max_new_tokens"),
        ("chat_template_kwargs", {"enable_thinking": [1]}, "chat_template_kwargs"),
        ("allowed_instructions", "grounding", "allowed_instructions"),
    ]:
        bad = copy.deepcopy(raw)
        bad["profiles"]["default"]["adapter_options"]["loadtime"][key] = value
        with pytest.raises(ModelConfigError, match=named):
            translate(bad, "test.yaml")


def test_lighton_ocr_2_is_served_from_both_of_sies_profiles() -> None:
    sglang = "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter"
    native = "sie_server.adapters.lighton_ocr.adapter:LightOnOCRAdapter"
    server = {"mem_fraction_static": 0.85, "meter_pages": True, "system_prompt": "Read it."}
    profiles = {
        "default": {
            "adapter_path": sglang,
            "adapter_options": {"loadtime": server, "runtime": {"max_new_tokens": 99}},
        },
        "transformers": {"adapter_path": native, "adapter_options": {"runtime": {"num_beams": 1}}},
    }
    raw = _sie(profiles, tasks={"encode": None, "score": None, "extract": {}})
    raw.update(sie_id="lightonai/LightOnOCR-2-1B", hf_id="lightonai/LightOnOCR-2-1B")
    config = _config(raw)
    assert config.family == "lighton_ocr"
    default = config.profile().adapter_options
    assert default.loadtime == {"system_prompt": "Read it."} and default.runtime.max_new_tokens == 99
    assert config.profile("transformers").adapter_options.runtime.num_beams == 1
    assert any("mem_fraction_static is SIE engine tuning" in note for note in config.notes)
    assert any("meter_pages is SIE's SGLang server setting" in note for note in config.notes)
    glm = copy.deepcopy(raw)
    glm.update(sie_id="zai-org/GLM-OCR", hf_id="zai-org/GLM-OCR")
    assert _config(glm).family == "glm_ocr"
    third = copy.deepcopy(raw)
    third.update(sie_id="lightonai/LightOnOCR-3-4B", hf_id="lightonai/LightOnOCR-3-4B")
    assert _config(third).family == "lighton_ocr3"
    other = copy.deepcopy(raw)
    other.update(sie_id="example/another-ocr-vlm", hf_id="example/another-ocr-vlm")
    with pytest.raises(ModelConfigError, match="LightOnOCR-2 and -3, GLM-OCR and PaddleOCR-VL are"):
        translate(other, "test.yaml")
    beams = copy.deepcopy(raw)
    beams["profiles"]["default"]["adapter_options"]["runtime"]["num_beams"] = 4
    with pytest.raises(ModelConfigError, match="greedily"):
        translate(beams, "test.yaml")
