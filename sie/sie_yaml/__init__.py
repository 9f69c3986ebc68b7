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
from sie.sie_yaml.adapters import ADAPTERS, CUSTOM_CODE_REPOS, NO_GENERATION, NO_VIDEO, AdapterRule, refused
from sie.sie_yaml.options import PROFILE_ENGINE_KNOBS, Refused, loadtime_options, runtime_options

__all__ = ["ADAPTERS", "AdapterRule", "Refused", "adapter_class", "is_sie_format", "translate"]


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
    for name, profile in list(profiles.items()):
        try:
            _check_outputs(profile, top)
        except Refused as exc:
            if name == default_name:
                raise ModelConfigError(f"{source}: profile '{name}': {exc}") from None
            model.refused_profiles[name] = str(exc)
            del profiles[name]
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
        for prefix, reason in CUSTOM_CODE_REPOS.items():
            if hf_id.startswith(prefix):
                raise Refused(reason)
    return out


def _copy(name: str) -> Callable[[dict[str, Any], Any, _Model], None]:
    def handle(out: dict[str, Any], value: Any, model: _Model) -> None:
        out[name] = value

    return handle


def _inputs(out: dict[str, Any], value: Any, model: _Model) -> None:
    inputs = dict(value or {})
    if inputs.pop("document", False):
        raise Refused("inputs.document: this server takes no document inputs")
    if inputs.pop("video", False):  # the model's other inputs are served; an item with video is a 400
        model.notes.append(f"inputs.video: {NO_VIDEO}; its other inputs are, and an item with video is a 400")
    out["inputs"] = inputs


def _tasks(out: dict[str, Any], value: Any, model: _Model) -> None:
    tasks = dict(value or {})
    if tasks.pop("generate", None) is not None:
        if not model.is_fake:
            raise Refused(f"tasks.generate: {NO_GENERATION}")
        model.notes.append(f"tasks.generate: {NO_GENERATION}; the fake's encode and score are")
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
    rule = ADAPTERS.get(cls, refused(f"SIE adapter {cls} has no counterpart in this server"))
    family = rule.family_for(model.sie_id)
    if family is None:
        raise Refused(f"{cls}: {rule.refusal}")
    out: dict[str, Any] = {"adapter": family}
    for key, value in profile.items():
        if key in ("adapter_path", "adapter_options"):
            continue
        if key in ("max_batch_tokens", "compute_precision"):
            if value is not None:
                out[key] = value
        elif key in PROFILE_ENGINE_KNOBS:
            model.notes.append(f"profile '{name}': {key} is SIE engine tuning, no effect here")
        else:
            raise Refused(f"'{key}' ({NO_GENERATION} or unknown to this server)")
    options = profile.get("adapter_options") or {}
    runtime: dict[str, Any] = dict(rule.runtime)
    loadtime: dict[str, Any] = {"trust_remote_code": True} if rule.runs_model_code else {}
    loadtime.update(rule.loadtime)
    if rule.log1p_relu_for_v3_ids and "v3" in model.sie_id:
        loadtime["activation"] = "log1p_relu"
    loadtime_options(options.get("loadtime") or {}, family, runtime, loadtime, model.notes, name)
    if not loadtime.get("trust_remote_code", True):
        del loadtime["trust_remote_code"]
    runtime_options(options.get("runtime") or {}, family, runtime)
    out["adapter_options"] = {"loadtime": loadtime, "runtime": runtime}
    return out


def _check_outputs(profile: dict[str, Any], top: Mapping[str, Any]) -> None:
    """A profile's vectors and default outputs against what the model's tasks declare."""
    encode = (top.get("tasks") or {}).get("encode") or {}
    runtime = profile["adapter_options"]["runtime"]
    token_dim = runtime.pop("token_dim", None)
    vectors = encode.get("multivector") or {}
    if token_dim is not None and vectors.get("dim") not in (None, token_dim):
        raise Refused(f"loadtime.token_dim {token_dim} differs from tasks.encode.multivector.dim")
    wanted = runtime.get("output_types") or []
    derived = {"dense": runtime.get("muvera") is not None, "sparse": runtime.get("smve") is not None}
    missing = [t for t in wanted if t not in encode and not derived.get(t)]
    if missing:
        raise Refused(f"output_types {missing} are not outputs of the model")
