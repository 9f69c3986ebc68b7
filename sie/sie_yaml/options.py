"""SIE's `adapter_options` of one profile, translated per family: `loadtime` (what the device reads at
load, or tokenization defaults the frontend reads) and `runtime` (per-request defaults)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sie.gliner_union import UNION_OPTIONS, parse_members, union_options
from sie.page_ocr import FAMILIES as _PAGE_OCR
from sie.sie_yaml.adapters import NV_EMBED

_TEXT_ENCODERS = frozenset({"dense", "hybrid", "splade", "colbert"})
_COL_VISION = frozenset({"colpali", "colqwen2", "colqwen3", "colsmol"})

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
# GLiNER2 profile options SIE's adapter takes at load; the frontend reads them from `loadtime`.
_GLINER2_LOADTIME = frozenset(
    {
        "classification_task",
        "default_labels",
        "multi_label",
        "positive_label",
        "threshold",
        "max_prompt_tokens",
    }
)
PROFILE_ENGINE_KNOBS = frozenset({"adaptive_batching", "admission_enabled", "kv_budget_tokens"})
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
_SMVE_KEYS = frozenset({"width", "k", "num_repetitions", "seed", "max_nonzeros"})
# SIE's DonutAdapter takes these at load as the defaults a request's options override.
_DONUT_LOADTIME = {"default_task": "task", "max_new_tokens": "max_new_tokens", "num_beams": "num_beams"}
# SIE's Qwen3-VL reranker falls back to a base model's processor when its own will not load.
_QWEN3_VL_PROCESSOR = (
    "has no effect: images are processed as the model's own folder says (its preprocessor_config.json, "
    "else config.json's patch sizes with Qwen3-VL's normalization), with SIE's pixel budget"
)


class Refused(Exception):
    """A field this server cannot honour for a profile; the message names it and says why."""


def loadtime_options(
    given: Mapping[str, Any],
    family: str,
    runtime: dict[str, Any],
    loadtime: dict[str, Any],
    notes: list[str],
    profile: str,
) -> None:
    for key, value in given.items():
        if key in _ENGINE_KNOBS:
            notes.append(f"profile '{profile}': loadtime.{key} is SIE engine tuning, no effect here")
        elif key == "trust_remote_code":
            loadtime["trust_remote_code"] = bool(value)
        elif key == "causal":
            # true: decoders load causal, as their configuration says; false: bidirectional (GritLM).
            if not value:
                _bidirectional(f"loadtime.causal: {value}", family, loadtime)
        elif key == "forward_kwargs":
            kwargs = dict(value or {})
            if kwargs != {"is_causal": False}:
                raise Refused(f"loadtime.forward_kwargs {kwargs}: a modified forward is not served here yet")
            _bidirectional("loadtime.forward_kwargs {'is_causal': False}", family, loadtime)
        elif key == "code_revision" and family in _TEXT_ENCODERS:
            # The revision of the code repository the folder's auto_map names (sie.gpu_proc.adapters.
            # common.loading_options); it only matters where the folder's own code runs.
            loadtime["code_revision"] = str(value)
        elif key == "backend" and family == "clip" and value == "open_clip":
            raise Refused(
                "loadtime.backend open_clip: the checkpoint is an OpenCLIP model (open_clip_config.json, "
                "built by the open_clip library, not transformers), which this server does not load"
            )
        elif key == "use_model_encode" and value:
            raise Refused(f"loadtime.use_model_encode (the checkpoint's own encode()): {NV_EMBED}")
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
        elif family in _COL_VISION and key in ("token_dim", "muvera_config"):
            _colbert_loadtime(key, value, runtime)  # MUVERA's defaults and the vector size, as ColBERT's
            continue
        elif family == "llm_reranker" and key in _LLM_RERANKER_TUNING:
            notes.append(f"profile '{profile}': loadtime.{key} is SIE engine tuning, no effect here")
        elif family == "llm_reranker" and _llm_reranker_loadtime(key, value, runtime, loadtime):
            continue
        elif key in ("base_processor_model", "base_processor_revision") and family == "qwen3_vl_reranker":
            notes.append(f"profile '{profile}': loadtime.{key} {_QWEN3_VL_PROCESSOR}")
        elif key == "score_threshold" and family == "owlv2":
            runtime.setdefault("threshold", value)
        elif family == "fake" and key in _FAKE_LOADTIME:
            loadtime[key] = value
        elif family == "fake" and key in _FAKE_NOTED:
            notes.append(f"profile '{profile}': loadtime.{key} {_FAKE_NOTED[key]}")
        elif key == "classification_type" and family == "gliclass":
            runtime.setdefault("multi_label", _is_multi_label(value))
        elif family == "gliner2" and key in _GLINER2_LOADTIME:
            loadtime[key] = value  # read by the frontend's GLiNER2 runner, checked per request
        elif family == "gliner2_decide" and key == "max_prompt_tokens":
            loadtime[key] = value  # read by the frontend's GLiNER2.5-Decide rows
        elif family == "gliner2_decide" and key == "inference_batch_tokens":
            notes.append(f"profile '{profile}': loadtime.{key} is SIE engine tuning, no effect here")
        elif key == "normalize" and family in _TEXT_ENCODERS:
            runtime.setdefault("normalize", bool(value))
        elif family == "donut" and key in _DONUT_LOADTIME:
            runtime_options({_DONUT_LOADTIME[key]: value}, family, runtime)  # SIE's defaults, as runtime's
        elif key == "max_len" and family == "gliner_bi":  # words read per text, by the frontend
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise Refused(f"loadtime.max_len {value!r} is not a positive integer")
            loadtime["max_len"] = value
        elif key == "max_num_visual_tokens" and family == "colqwen3":  # the frontend's page cap
            loadtime[key] = _positive_length(value, f"loadtime.{key}")
        elif key == "members" and family == "gliner_union":
            loadtime["members"] = _union_members(value)
        elif not _family_loadtime(family, key, value, loadtime, notes, profile):
            raise Refused(f"loadtime.{key} is not supported for the {family} family")


def _family_loadtime(
    family: str, key: str, value: Any, loadtime: dict[str, Any], notes: list[str], profile: str
) -> bool:
    """A load-time key one family alone reads, taken into `loadtime`; False: not one of them."""
    if family == "context_pruner":
        return _context_pruner_loadtime(key, value, loadtime, notes, profile)
    if family == "privacy_filter":
        return _privacy_filter_loadtime(key, value, loadtime)
    if family in PAGE_OCR_FAMILIES:
        tasks = tuple(_PAGE_OCR[family].task_prompts)
        return _page_ocr_loadtime(key, value, loadtime, notes, profile, tasks)
    return False


def _context_pruner_loadtime(
    key: str, value: Any, loadtime: dict[str, Any], notes: list[str], profile: str
) -> bool:
    """Where the keep head is and its sizes (checked against its weights at load)."""
    if key in ("pruning_head_path", "pruning_head_file"):
        if not isinstance(value, str) or not value:
            raise Refused(f"loadtime.{key} {value!r} is not a path or a Hub id")
        loadtime[key] = value
    elif key in ("hidden_size", "intermediate_size"):
        loadtime[key] = _positive_length(value, f"loadtime.{key}")
    elif key == "dropout":
        notes.append(f"profile '{profile}': loadtime.dropout has no effect at inference")
    else:
        return False
    return True


def _privacy_filter_loadtime(key: str, value: Any, loadtime: dict[str, Any]) -> bool:
    """Where the Viterbi calibration is (`checkpoint_subdir`: SIE reads OPF's own checkpoint there;
    the weights here are the folder's transformers ones) and whether spans lose edge whitespace."""
    if key == "checkpoint_subdir":
        if value not in ("", "original"):
            raise Refused(f"loadtime.checkpoint_subdir {value!r} is not 'original' or ''")
        loadtime[key] = value
    elif key == "trim_span_whitespace":
        if not isinstance(value, bool):
            raise Refused(f"loadtime.trim_span_whitespace {value!r} is not a boolean")
        loadtime[key] = value
    elif key == "window_tokens":
        loadtime[key] = _positive_length(value, f"loadtime.{key}")
    else:
        return False
    return True


# SIE's SGLang server settings for its OCR models (its memory and concurrency ones are among
# _ENGINE_KNOBS); here the model runs in the device process.
_SGLANG_SERVER = frozenset({"served_model_name", "meter_pages", "extra_env", "extra_launch_args"})
PAGE_OCR_FAMILIES = frozenset(_PAGE_OCR)


def _page_ocr_loadtime(
    key: str,
    value: Any,
    loadtime: dict[str, Any],
    notes: list[str],
    profile: str,
    family_tasks: tuple[str, ...],
) -> bool:
    """The prompts (system turn, default text, tasks, the instructions allowed, chat template
    arguments), the decoding (temperature, top_p, most new tokens), and SIE's SGLang settings, noted."""
    if key in ("system_prompt", "default_prompt"):
        if not isinstance(value, str):
            raise Refused(f"loadtime.{key} {value!r} is not a string")
        loadtime[key] = value
    elif key in ("task_prompts", "task_labels") and family_tasks:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise Refused(f"loadtime.{key} {value!r} is not a mapping of tasks to strings")
        unknown = set(value) - set(family_tasks)
        if unknown:
            raise Refused(f"loadtime.{key}: {sorted(unknown)} are not tasks of {', '.join(family_tasks)}")
        loadtime[key] = dict(value)
    elif key == "default_task" and family_tasks:
        if value not in family_tasks:
            raise Refused(f"loadtime.default_task {value!r} is not one of {', '.join(family_tasks)}")
        loadtime[key] = value
    elif key == "processor_use_fast":
        notes.append(f"profile '{profile}': loadtime.processor_use_fast: pages are resized here with Pillow")
    elif key in ("temperature", "top_p"):
        ceiling = 1 if key == "top_p" else 1e6
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= ceiling:
            raise Refused(f"loadtime.{key} {value!r} is not a positive number (top_p at most 1)")
        loadtime[key] = float(value)
    elif key == "max_new_tokens":
        loadtime[key] = _positive_length(value, f"loadtime.{key}")
    elif key == "chat_template_kwargs":
        if not isinstance(value, dict) or not all(
            isinstance(v, str | int | float | bool) for v in value.values()
        ):
            raise Refused(
                f"loadtime.chat_template_kwargs {value!r} is not a mapping of names to plain values"
            )
        loadtime[key] = dict(value)
    elif key == "allowed_instructions":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise Refused(f"loadtime.allowed_instructions {value!r} is not a list of instructions")
        loadtime[key] = list(value)
    elif key in _SGLANG_SERVER:
        notes.append(f"profile '{profile}': loadtime.{key} is SIE's SGLang server setting, no effect here")
    else:
        return False
    return True


def _union_members(value: Any) -> list[Any]:
    """A GLiNER union's other members, checked (sie.gliner_union), kept as SIE names them."""
    try:
        parse_members(value)
    except ValueError as exc:
        raise Refused(f"loadtime.members: {exc}") from None
    return list(value)


def _bidirectional(field_text: str, family: str, loadtime: dict[str, Any]) -> None:
    """A decoder embedder run with bidirectional attention (GritLM): the dense adapter's option."""
    if family != "dense":
        raise Refused(f"{field_text} (bidirectional attention) is served for dense decoders only")
    loadtime["bidirectional"] = True


def _colbert_loadtime(key: str, value: Any, runtime: dict[str, Any]) -> bool:
    """ColBERT's load-time settings, which are tokenization, MUVERA and SMVE defaults here (frontend
    work)."""
    if key in _COLBERT_LOADTIME_TO_RUNTIME:
        runtime[_COLBERT_LOADTIME_TO_RUNTIME[key]] = value
    elif key == "max_seq_length":
        # SIE's ColBERT adapters: the document length unless `doc_max_length` says otherwise; a
        # profile's runtime max_seq_length overrides both (`_RUNTIME_COLBERT`).
        runtime.setdefault("document_length", _positive_length(value))
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
    elif key == "smve_config":
        config = dict(value or {})
        unknown = sorted(set(config) - _SMVE_KEYS)
        if unknown:
            raise Refused(f"loadtime.smve_config keys {unknown} are not supported")
        runtime["smve_config"] = config
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


def _positive_length(value: Any, key: str = "max_seq_length") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Refused(f"{key} {value!r} is not a positive integer")
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
        "smve",
    }
)
_RUNTIME_COLBERT = {"query_max_length": "query_length", "max_seq_length": "document_length"}


def runtime_options(given: Mapping[str, Any], family: str, runtime: dict[str, Any]) -> None:
    for key, value in given.items():
        if key == "pooling":
            runtime["pooling"] = _pooling(value, family)
        elif key in _RUNTIME_SAME:
            runtime[key] = value
        elif family == "colbert" and key in _RUNTIME_COLBERT:
            runtime[_RUNTIME_COLBERT[key]] = value
        elif key == "max_seq_length" and family in ("llm_reranker", "splade"):
            runtime["max_seq_length"] = _positive_length(value)
        elif key == "multi_label" and family == "nli_zero_shot":
            runtime["multi_label"] = bool(value)
        elif key == "merge_adjacent_entities" and family == "gliner":
            runtime["merge_adjacent_entities"] = bool(value)
        elif key == "precompute_labels" and family == "gliner_bi":
            if value is not True:  # true is what the device does: label embeddings cached per label set
                raise Refused("runtime.precompute_labels: false: label embeddings are always cached here")
        elif key == "classification_type" and family == "gliclass":
            runtime["multi_label"] = _is_multi_label(value)
        elif key == "score_threshold" and family == "owlv2":
            runtime["threshold"] = value
        elif key in ("box_threshold", "text_threshold") and family == "grounding_dino":
            runtime["threshold" if key == "box_threshold" else key] = value
        elif key in ("prune_threshold", "highlight_threshold") and family == "context_pruner":
            runtime[key] = value
        elif key == "relation_threshold" and family == "gliner":
            runtime["relation_threshold"] = value  # joint entity-relation models (gliner relex)
        elif key == "num_beams" and family == "donut" and value != 1:
            raise Refused(f"runtime.num_beams {value!r}: Donut decodes greedily here (num_beams 1)")
        elif key in ("task", "max_new_tokens", "num_beams") and family == "donut":
            runtime[key] = value  # the task prompt and generation settings, checked per request
        elif key in UNION_OPTIONS and family == "gliner_union":
            runtime[key] = value  # how the members' spans are composed, checked below
        elif key in ("task", "max_new_tokens", "num_beams") and family == "florence2":
            runtime[key] = value  # the task token and generation settings, checked per request
        elif key == "num_beams" and family in PAGE_OCR_FAMILIES and value != 1:
            raise Refused(f"runtime.num_beams {value!r}: page OCR decodes greedily here (num_beams 1)")
        elif key == "task" and family in PAGE_OCR_FAMILIES and _PAGE_OCR[family].task_prompts:
            if value not in _PAGE_OCR[family].task_prompts:
                raise Refused(
                    f"runtime.task {value!r} is not one of {', '.join(_PAGE_OCR[family].task_prompts)}"
                )
            runtime[key] = value
        elif key in ("max_new_tokens", "num_beams") and family in PAGE_OCR_FAMILIES:
            runtime[key] = value  # the most tokens a page may take; a request may ask for fewer
        elif key == "lora_id":
            raise Refused(
                "runtime.lora_id: LoRA adapters from the Hugging Face cache are not loaded by profile here; "
                "list the adapter folder under the model's `loras:` and pass options.lora"
            )
        else:
            raise Refused(f"runtime.{key} is not supported for the {family} family")
    if family == "gliner_union":
        try:
            union_options(runtime)
        except ValueError as exc:
            raise Refused(f"runtime: {exc}") from None


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
