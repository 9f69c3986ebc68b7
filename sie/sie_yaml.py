"""SIE's model YAML, read as it is: translated into our format, field by field.

Each SIE adapter class maps to one of our families (`ADAPTERS`). Every field of SIE's schema is
either honoured (translated), noted (an engine-tuning knob of SIE's that has no effect on results
here, reported once at start and by `python -m sie catalog`), or refused by name with the reason. A
refused field makes its profile unavailable; a refused default profile makes the model unsupported
(`ModelConfigError`), which the catalog lists with that reason instead of stopping the server.

Profiles follow SIE's rules: one level of `extends`, the child's scalar fields override the
parent's, and a non-empty `loadtime` or `runtime` block replaces the parent's block whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sie.model_config import ModelConfigError

_TEXT_ENCODERS = frozenset({"dense", "hybrid", "splade", "colbert"})


@dataclass(frozen=True, slots=True)
class AdapterRule:
    """What an SIE adapter class is here: a family, or the reason there is none yet."""

    family: str | None
    refusal: str = ""
    # SIE's adapter runs the model folder's own code unless the YAML says `trust_remote_code: false`.
    runs_model_code: bool = False
    # Runtime options the adapter class itself implies (its prompt recipe), before the YAML's own.
    runtime: Mapping[str, Any] = field(default_factory=dict)


def _family(name: str, *, runs_model_code: bool = False) -> AdapterRule:
    return AdapterRule(name, runs_model_code=runs_model_code)


def _refused(reason: str) -> AdapterRule:
    return AdapterRule(None, reason)


_NO_GENERATION = "text generation is not served by this server"

# SIE adapter class name -> our family (or why not). Unknown classes are refused by name. An adapter
# that runs custom architectures natively in SIE (RoPE, Nomic, Jina, Candle's kernels) runs the
# model folder's own code here, as SIE's own transformers-based adapters do by default.
ADAPTERS: dict[str, AdapterRule] = {
    "SentenceTransformerDenseAdapter": _family("dense", runs_model_code=True),
    "CandleEmbeddingAdapter": _family("dense", runs_model_code=True),
    "BertFlashAdapter": _family("dense"),
    "XLMRobertaFlashAdapter": _family("dense", runs_model_code=True),
    "ModernBERTFlashAdapter": _family("dense", runs_model_code=True),
    "PyTorchEmbeddingAdapter": _family("dense", runs_model_code=True),
    "Qwen2FlashAdapter": _family("dense", runs_model_code=True),
    "SGLangEmbeddingAdapter": _family("dense"),
    "RoPEFlashAdapter": _family("dense", runs_model_code=True),
    "NomicFlashAdapter": _family("dense", runs_model_code=True),
    "BGEM3FlashAdapter": _family("hybrid"),
    "BGEM3FlagAdapter": _family("hybrid"),
    "SPLADEFlashAdapter": _family("splade"),
    "ColBERTAdapter": _family("colbert"),
    "ColBERTModernBERTFlashAdapter": _family("colbert"),
    "ColBERTRotaryFlashAdapter": _family("colbert", runs_model_code=True),
    "BertFlashCrossEncoderAdapter": _family("cross_encoder"),
    "ModernBertFlashCrossEncoderAdapter": _family("cross_encoder", runs_model_code=True),
    "JinaFlashCrossEncoderAdapter": _family("cross_encoder", runs_model_code=True),
    "CrossEncoderAdapter": _family("cross_encoder"),
    "NLIClassificationFlashAdapter": _family("nli_zero_shot"),
    "NLIClassificationAdapter": _family("nli_zero_shot"),
    "GLiNERAdapter": _family("gliner"),
    "GLiClassAdapter": _family("gliclass"),
    "CLIPAdapter": _family("clip"),
    "SiglipAdapter": _family("clip"),
    "Owlv2Adapter": _family("owlv2"),
    "WhisperAdapter": _family("whisper"),
    "GTESparseFlashAdapter": _refused(
        "GTE masked-LM sparse with inference-free queries (queries by IDF lookup) is not served here yet"
    ),
    "PrivacyFilterAdapter": _refused("OpenAI's privacy filter is not a transformers model (its own runtime)"),
    # Families this server does not have.
    "GLiNERBiAdapter": _refused("the GLiNER bi-encoder is not served here yet"),
    "GLiNERUnionAdapter": _refused("the windowed union of two GLiNER models is not served here"),
    "GLiNER2Adapter": _refused("GLiNER2 is not served here yet"),
    "GLiNER2EntitiesAdapter": _refused("GLiNER2 is not served here yet"),
    "GLiNER2ClassificationAdapter": _refused("GLiNER2 is not served here yet"),
    "GLiNER2DecideAdapter": _refused("GLiNER2 is not served here yet"),
    "GLiRELAdapter": _refused("relation extraction (GLiREL) is not served here"),
    "GLiFormerAdapter": _refused("GLiFormer is not served here"),
    "Qwen2FlashCrossEncoderAdapter": _family("llm_reranker"),
    "NativeCausalCrossEncoderAdapter": AdapterRule("llm_reranker", runtime={"input_format": "native"}),
    "Qwen3VLRerankerAdapter": _refused("vision-language rerankers are not served here"),
    "ColPaliAdapter": _refused("visual-document retrieval (ColPali) is not served here yet"),
    "ColQwen2Adapter": _refused("visual-document retrieval (ColQwen2) is not served here yet"),
    "ColQwen3Adapter": _refused("visual-document retrieval (ColQwen3) is not served here yet"),
    "ColSmolAdapter": _refused("visual-document retrieval (ColSmol) is not served here yet"),
    "NemoColEmbedAdapter": _refused("NVIDIA's vision-language ColEmbed is not served here"),
    "Qwen3VLEmbeddingAdapter": _refused("vision-language embeddings (Qwen3-VL) are not served here yet"),
    "TopkEmbedAdapter": _refused("Gated DeltaNet multimodal embedders are not served here"),
    "SparseEncoderVisionAdapter": _refused("vision sparse encoders are not served here"),
    "GroundingDINOAdapter": _refused("open-set detection with Grounding DINO is not served here"),
    "Sam3Adapter": _refused("segmentation (SAM 3) is not served here"),
    "ParakeetTDTAdapter": _refused("NeMo Parakeet speech recognition is not served here"),
    "StablebridgePrunerAdapter": _refused("context pruning is not served here"),
    "FakeAdapter": _family("fake"),
    "DoclingAdapter": _refused("document conversion (Docling) is not served here"),
    "DonutAdapter": _refused("OCR-free document understanding (Donut) is not served here"),
    "Florence2Adapter": _refused("Florence-2 vision tasks are not served here"),
    "LayaAdapter": _refused("Laya is not served here"),
    "MinerUVLAdapter": _refused(_NO_GENERATION),
    "CTranslate2GenerationAdapter": _refused(_NO_GENERATION),
    "SGLangGenerationAdapter": _refused(_NO_GENERATION),
    "SGLangGemmaAdapter": _refused(_NO_GENERATION),
    "SGLangCuda13Adapter": _refused(_NO_GENERATION),
    "SGLangVisionExtractAdapter": _refused(_NO_GENERATION),
}

# Checkpoints whose YAML reads as servable but whose computation this server does not have yet:
# refused rather than served wrong.
_CUSTOM_CODE_REPOS: dict[str, str] = {
    "nvidia/NV-Embed-v2": "its own code pools inside the forward (latent attention), not served here yet",
    "opensearch-project/opensearch-neural-sparse-encoding-doc-": (
        "inference-free sparse retrieval (queries by IDF lookup, no forward) is not served here yet"
    ),
}

# SIE's engine-tuning knobs: they change how SIE's kernels run, not what a model computes.
_ENGINE_KNOBS = frozenset(
    {
        "attention_backend",
        "attn_implementation",
        "cuda_graphs",
        "cuda_graph_tokens",
        "disable_cuda_graph",
        "disable_piecewise_cuda_graph",
        "fused_kernels",
        "fused_rope",
        "mem_fraction_static",
        "uses_legacy_transformers_cache",
        "max_concurrent_requests",
        "max_concurrent_dispatch",
        "native_batch_max_size",
        "native_batch_max_tokens",
        "modernbert_flash",
    }
)
_PROFILE_ENGINE_KNOBS = frozenset({"adaptive_batching", "admission_enabled", "kv_budget_tokens"})
_POOLING = {"cls": "cls", "mean": "mean", "last": "last", "last_token": "last"}
_COLBERT_LOADTIME_TO_RUNTIME = {
    "query_prefix": "query_prefix",
    "doc_prefix": "document_prefix",
    "query_max_length": "query_length",
    "doc_max_length": "document_length",
    "query_expansion": "do_query_expansion",
}
# The fake's load-time options read by its adapter (sie.gpu_proc.adapters.fake), and those without
# effect here, with why.
_FAKE_LOADTIME = frozenset({"memory_footprint_bytes", "fault_key", "faults", "request_latency_s"})
_FAKE_NOTED = {
    "default_completion_tokens": "is for generation, not served here",
    "inter_token_latency_s": "is for generation, not served here",
    "synthetic_usage": "has no effect: usage here always counts one token per code point",
}
_MUVERA_KEYS = frozenset(
    {"num_repetitions", "num_simhash_projections", "projection_dim", "final_projection_dim", "center_tokens"}
)


class Refused(Exception):
    """A field this server cannot honour for a profile; the message names it and says why."""


def is_sie_format(raw: Mapping[str, Any]) -> bool:
    """SIE's files name an adapter class per profile (`adapter_path`); ours name a family."""
    profiles = raw.get("profiles")
    return isinstance(profiles, Mapping) and any(
        isinstance(p, Mapping) and "adapter_path" in p for p in profiles.values()
    )


def adapter_class(adapter_path: str) -> str:
    """`sie_server.adapters.bert_flash:BertFlashAdapter` -> `BertFlashAdapter`."""
    return adapter_path.rpartition(":")[2] or adapter_path


@dataclass(slots=True)
class _Model:
    """What translating one file gathers besides the profiles: notes and left-out profiles."""

    source: str
    sie_id: str
    # SIE's fake engine: package-backed with nothing in the package, and its generate task left aside.
    is_fake: bool = False
    notes: list[str] = field(default_factory=list)
    refused_profiles: dict[str, str] = field(default_factory=dict)


def translate(raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """One SIE model mapping -> the same model in our format (a mapping for `parse_model_config`).

    Raises ModelConfigError naming the first field that makes the model unservable."""
    sie_id = raw.get("sie_id")
    if not isinstance(sie_id, str) or not sie_id:
        raise ModelConfigError(f"{source}: sie_id is missing")
    model = _Model(source, sie_id, is_fake=_is_fake(raw))
    try:
        top = _top_level(raw, model)
    except Refused as exc:
        raise ModelConfigError(f"{source}: {exc}") from None
    profiles = _profiles(raw, model)
    default_name = (
        "default" if "default" in raw.get("profiles", {}) else next(iter(raw.get("profiles") or {}), "")
    )
    if default_name in model.refused_profiles or not profiles:
        reason = model.refused_profiles.get(default_name, "it has no profiles")
        raise ModelConfigError(f"{source}: profile '{default_name}': {reason}")
    family = profiles[default_name]["adapter"]
    for name, profile in list(profiles.items()):
        if profile["adapter"] != family:
            model.refused_profiles[name] = (
                f"its adapter is of family '{profile['adapter']}', the model's default is '{family}' "
                "(a model's profiles share one loaded model here)"
            )
            del profiles[name]
    _check_outputs(profiles, top)
    notes = [*model.notes, *(f"profile '{n}' left out: {r}" for n, r in model.refused_profiles.items())]
    return {**top, "profiles": profiles, "notes": notes, "refused_profiles": model.refused_profiles}


def _is_fake(raw: Mapping[str, Any]) -> bool:
    profiles = raw.get("profiles")
    return isinstance(profiles, Mapping) and any(
        isinstance(p, Mapping) and adapter_class(str(p.get("adapter_path", ""))) == "FakeAdapter"
        for p in profiles.values()
    )


def _top_level(raw: Mapping[str, Any], model: _Model) -> dict[str, Any]:
    out: dict[str, Any] = {"sie_id": model.sie_id}
    for key, value in raw.items():
        if key in ("sie_id", "profiles"):
            continue
        handler = _TOP_LEVEL.get(key)
        if handler is None:
            raise Refused(f"field '{key}' is not part of SIE's model schema this server knows")
        handler(out, value, model)
    hf_id = out.get("hf_id")
    if isinstance(hf_id, str):
        for prefix, reason in _CUSTOM_CODE_REPOS.items():
            if hf_id.startswith(prefix):
                raise Refused(reason)
    return out


def _copy(name: str) -> Callable[[dict[str, Any], Any, _Model], None]:
    def handle(out: dict[str, Any], value: Any, model: _Model) -> None:
        out[name] = value

    return handle


def _inputs(out: dict[str, Any], value: Any, model: _Model) -> None:
    inputs = dict(value or {})
    for kind in ("video", "document"):
        if inputs.pop(kind, False):
            raise Refused(f"inputs.{kind}: this server takes no {kind} inputs")
    out["inputs"] = inputs


def _tasks(out: dict[str, Any], value: Any, model: _Model) -> None:
    tasks = dict(value or {})
    if tasks.pop("generate", None) is not None:
        if not model.is_fake:
            raise Refused(f"tasks.generate: {_NO_GENERATION}")
        model.notes.append(f"tasks.generate: {_NO_GENERATION}; the fake's encode and score are")
    encode = {k: v for k, v in (tasks.get("encode") or {}).items() if v is not None}
    out["tasks"] = {
        "encode": encode or None,
        "score": tasks.get("score"),
        "extract": tasks.get("extract"),
    }


def _package_backed(out: dict[str, Any], value: Any, model: _Model) -> None:
    if value and not model.is_fake:  # the fake's package holds no weights; it needs none
        raise Refused("package_backed: weights inside SIE's own Python package are not available here")


_TOP_LEVEL: dict[str, Callable[[dict[str, Any], Any, _Model], None]] = {
    "hf_id": _copy("hf_id"),
    "hf_revision": _copy("hf_revision"),
    "hf_tokenizer_dependencies": _copy("hf_tokenizer_dependencies"),
    "max_sequence_length": _copy("max_sequence_length"),
    "inputs": _inputs,
    "tasks": _tasks,
    "package_backed": _package_backed,
}


def _profiles(raw: Mapping[str, Any], model: _Model) -> dict[str, dict[str, Any]]:
    declared = raw.get("profiles") or {}
    translated: dict[str, dict[str, Any]] = {}
    for name in declared:
        try:
            resolved = _resolve(declared, name)
            translated[name] = _profile(resolved, model, name)
        except Refused as exc:
            model.refused_profiles[name] = str(exc)
    return translated


def _resolve(declared: Mapping[str, Any], name: str) -> dict[str, Any]:
    """SIE's `extends`: one level; child scalars win; a non-empty options block replaces the parent's."""
    profile = dict(declared[name] or {})
    parent_name = profile.pop("extends", None)
    if parent_name is None:
        return profile
    parent = declared.get(parent_name)
    if not isinstance(parent, Mapping) or "extends" in parent:
        raise Refused(f"extends '{parent_name}', which is missing or extends another profile itself")
    merged = {k: v for k, v in parent.items() if k != "adapter_options"}
    merged.update({k: v for k, v in profile.items() if v is not None and k != "adapter_options"})
    parent_options = parent.get("adapter_options") or {}
    own_options = profile.get("adapter_options") or {}
    merged["adapter_options"] = {
        block: dict(own_options.get(block) or parent_options.get(block) or {})
        for block in ("loadtime", "runtime")
    }
    return merged


def _profile(profile: Mapping[str, Any], model: _Model, name: str) -> dict[str, Any]:
    path = profile.get("adapter_path")
    if not isinstance(path, str):
        raise Refused("no adapter_path")
    cls = adapter_class(path)
    rule = ADAPTERS.get(cls, _refused(f"SIE adapter {cls} has no counterpart in this server"))
    if rule.family is None:
        raise Refused(f"{cls}: {rule.refusal}")
    out: dict[str, Any] = {"adapter": rule.family}
    for key, value in profile.items():
        if key in ("adapter_path", "adapter_options"):
            continue
        if key in ("max_batch_tokens", "compute_precision"):
            if value is not None:
                out[key] = value
        elif key in _PROFILE_ENGINE_KNOBS:
            model.notes.append(f"profile '{name}': {key} is SIE engine tuning, no effect here")
        else:
            raise Refused(f"'{key}' ({_NO_GENERATION} or unknown to this server)")
    options = profile.get("adapter_options") or {}
    runtime: dict[str, Any] = dict(rule.runtime)
    loadtime: dict[str, Any] = {"trust_remote_code": True} if rule.runs_model_code else {}
    _loadtime(options.get("loadtime") or {}, rule.family, runtime, loadtime, model, name)
    if not loadtime.get("trust_remote_code", True):
        del loadtime["trust_remote_code"]
    _runtime(options.get("runtime") or {}, rule.family, runtime)
    out["adapter_options"] = {"loadtime": loadtime, "runtime": runtime}
    return out


def _loadtime(
    given: Mapping[str, Any],
    family: str,
    runtime: dict[str, Any],
    loadtime: dict[str, Any],
    model: _Model,
    profile: str,
) -> None:
    for key, value in given.items():
        if key in _ENGINE_KNOBS:
            model.notes.append(f"profile '{profile}': loadtime.{key} is SIE engine tuning, no effect here")
        elif key == "trust_remote_code":
            loadtime["trust_remote_code"] = bool(value)
        elif key == "causal":
            if not value:
                raise Refused("loadtime.causal: false (a bidirectional decoder) is not served here yet")
            # Decoders load causal, as their configuration says: nothing to change.
        elif key == "forward_kwargs":
            raise Refused(f"loadtime.forward_kwargs {dict(value)}: a modified forward is not served here yet")
        elif key == "append_eos":
            loadtime["append_eos"] = bool(value)
        elif key == "dense_projection_path" and family == "dense":
            loadtime["dense_projection_path"] = str(value)
        elif key == "config_kwargs":
            loadtime["config_kwargs"] = dict(value or {})
        elif key == "default_instruction":
            runtime.setdefault("default_instruction", value)
        elif family == "colbert" and _colbert_loadtime(key, value, runtime):
            continue
        elif family == "llm_reranker" and key in _LLM_RERANKER_TUNING:
            model.notes.append(f"profile '{profile}': loadtime.{key} is SIE engine tuning, no effect here")
        elif family == "llm_reranker" and _llm_reranker_loadtime(key, value, runtime, loadtime):
            continue
        elif key == "score_threshold" and family == "owlv2":
            runtime.setdefault("threshold", value)
        elif family == "fake" and key in _FAKE_LOADTIME:
            loadtime[key] = value
        elif family == "fake" and key in _FAKE_NOTED:
            model.notes.append(f"profile '{profile}': loadtime.{key} {_FAKE_NOTED[key]}")
        elif key == "classification_type" and family == "gliclass":
            runtime.setdefault("multi_label", _is_multi_label(value))
        elif key == "normalize" and family in _TEXT_ENCODERS:
            runtime.setdefault("normalize", bool(value))
        else:
            raise Refused(f"loadtime.{key} is not supported for the {family} family")


def _colbert_loadtime(key: str, value: Any, runtime: dict[str, Any]) -> bool:
    """ColBERT's load-time settings, which are tokenization and MUVERA defaults here (frontend work)."""
    if key in _COLBERT_LOADTIME_TO_RUNTIME:
        runtime[_COLBERT_LOADTIME_TO_RUNTIME[key]] = value
    elif key == "doc_punctuation_skiplist":
        if not value:
            runtime["skiplist_words"] = []
    elif key == "skip_special_tokens":
        if value:
            raise Refused(
                "loadtime.skip_special_tokens: true (dropping special tokens' vectors) is not served"
            )
    elif key == "token_dim":
        runtime["token_dim"] = int(value)
    elif key == "muvera_config":
        config = dict(value or {})
        unknown = sorted(set(config) - _MUVERA_KEYS)
        if unknown:
            raise Refused(f"loadtime.muvera_config keys {unknown} are not supported")
        runtime["muvera_config"] = config
    else:
        return False
    return True


# SIE's Qwen2FlashCrossEncoderAdapter options: the score tokens and how they make a score (the
# device's, at load) and the prompt recipe and its length (the frontend's, per profile).
_LLM_RERANKER_FORMATS = ("mxbai", "qwen3")
_LLM_RERANKER_SCORE_MODES = ("logit_diff", "log_softmax")
# Shared-prefix encoding across rows and requests: the same scores up to floating-point rounding.
_LLM_RERANKER_TUNING = frozenset({"prefix_reuse", "prefix_cache_mb"})


def _llm_reranker_loadtime(key: str, value: Any, runtime: dict[str, Any], loadtime: dict[str, Any]) -> bool:
    if key in ("yes_token", "no_token"):
        loadtime[key] = str(value)
    elif key == "score_mode":
        loadtime[key] = _one_of(key, value, _LLM_RERANKER_SCORE_MODES)
    elif key == "input_format":
        runtime[key] = _one_of(key, value, _LLM_RERANKER_FORMATS)
    elif key == "max_seq_length":
        runtime["max_seq_length"] = _positive_length(value)
    else:
        return False
    return True


def _one_of(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise Refused(f"loadtime.{key} '{value}' is not one of {', '.join(allowed)}")
    return str(value)


def _positive_length(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Refused(f"max_seq_length {value!r} is not a positive integer")
    return value


# SIE runtime keys copied under the same name, and those renamed.
_RUNTIME_SAME = frozenset(
    {
        "normalize",
        "query_template",
        "doc_template",
        "instruction",
        "default_instruction",
        "output_types",
        "output_similarity",
        "hypothesis_template",
        "threshold",
        "muvera",
    }
)
_RUNTIME_COLBERT = {"query_max_length": "query_length", "max_seq_length": "document_length"}


def _runtime(given: Mapping[str, Any], family: str, runtime: dict[str, Any]) -> None:
    for key, value in given.items():
        if key == "pooling":
            runtime["pooling"] = _pooling(value, family)
        elif key in _RUNTIME_SAME:
            runtime[key] = value
        elif family == "colbert" and key in _RUNTIME_COLBERT:
            runtime[_RUNTIME_COLBERT[key]] = value
        elif key == "max_seq_length" and family == "llm_reranker":
            runtime["max_seq_length"] = _positive_length(value)
        elif key == "multi_label" and family == "nli_zero_shot":
            runtime["multi_label"] = bool(value)
        elif key == "merge_adjacent_entities" and family == "gliner":
            runtime["merge_adjacent_entities"] = bool(value)
        elif key == "classification_type" and family == "gliclass":
            runtime["multi_label"] = _is_multi_label(value)
        elif key == "score_threshold" and family == "owlv2":
            runtime["threshold"] = value
        elif key == "lora_id":
            raise Refused(
                "runtime.lora_id: LoRA adapters from the Hugging Face cache are not loaded by profile here; "
                "list the adapter folder under the model's `loras:` and pass options.lora"
            )
        else:
            raise Refused(f"runtime.{key} is not supported for the {family} family")


def _is_multi_label(value: Any) -> bool:
    """GLiClass's classification_type: the default of a request's `options.classification_type`."""
    if value not in ("single-label", "multi-label"):
        raise Refused(f"classification_type {value!r} is not 'single-label' or 'multi-label'")
    return bool(value == "multi-label")


def _pooling(value: Any, family: str) -> str:
    if value == "splade" and family in ("splade", "hybrid"):
        return "mean"  # a SPLADE model's own max-pooled log-saturation; the dense pooling is unused
    if value not in _POOLING:
        raise Refused(f"runtime.pooling '{value}' is not supported (cls, mean, last, last_token)")
    return _POOLING[value]


def _check_outputs(profiles: Mapping[str, dict[str, Any]], top: Mapping[str, Any]) -> None:
    encode = (top.get("tasks") or {}).get("encode") or {}
    for name, profile in profiles.items():
        runtime = profile["adapter_options"]["runtime"]
        token_dim = runtime.pop("token_dim", None)
        vectors = encode.get("multivector") or {}
        if token_dim is not None and vectors.get("dim") not in (None, token_dim):
            raise ModelConfigError(
                f"profile '{name}': loadtime.token_dim {token_dim} differs from tasks.encode.multivector.dim"
            )
        wanted = runtime.get("output_types") or []
        muvera = runtime.get("muvera") is not None
        missing = [t for t in wanted if t not in encode and not (t == "dense" and muvera)]
        if missing:
            raise ModelConfigError(f"profile '{name}': output_types {missing} are not outputs of the model")
