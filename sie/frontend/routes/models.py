"""GET /v1/models and /v1/models/{model}: the catalogue and each model's state (JSON always).

Besides SIE's fields each model says where it sits on this server (`device`, `memory_bytes`,
`last_used` as Unix seconds, `queue_depth`, `loads` since the server started) and which server
this is (`instance`, as in the X-SIE-Instance header): behind a balancer, that is how to find
where a model lives.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from sie.catalog import UnsupportedModel
from sie.frontend.state import FrontendState
from sie.model_config import ModelConfig, profile_in_id
from sie.shm.control import ModelState

_STATE_NAMES = {
    ModelState.AVAILABLE: "available",
    ModelState.LOADING: "loading",
    ModelState.LOADED: "loaded",
    ModelState.FAILED: "failed",
    ModelState.UNLOADING: "unloading",
}


def placement_info(state: FrontendState, slot: int) -> dict[str, Any]:
    placed = state.devices.placements(slot)
    last_used_ns = max((p.usage.last_used_ns for p in placed), default=0)
    age_s = (time.monotonic_ns() - last_used_ns) / 1e9  # the devices stamp with the monotonic clock
    return {
        "device": ",".join(p.device for p in placed) or None,  # "cuda:0,cuda:1" when on several
        "memory_bytes": sum(p.usage.memory_bytes for p in placed),
        "last_used": round(time.time() - age_s, 3) if last_used_ns else None,
        "queue_depth": sum(p.usage.queue_depth for p in placed),
        "loads": state.devices.loads(slot),  # a count that grows with reloads after eviction
    }


def model_info(state: FrontendState, config: ModelConfig, instance: str, name: str = "") -> dict[str, Any]:
    """A model's entry; under a profile-qualified `name`, that profile alone, as its default (SIE
    lists each variant id so)."""
    slot = state.catalog.slot(config.sie_id)
    model_state = state.devices.model_state(slot)
    error = state.devices.model_error(slot) if model_state == ModelState.FAILED else ""
    inputs = list(config.input_kinds())
    outputs = config.output_types()
    if config.supports_score():
        outputs.append("score")
    if config.supports_extract():
        outputs.append("json")
    dims = {
        kind: spec.dim
        for kind in ("dense", "sparse", "multivector")
        if config.tasks.encode and (spec := getattr(config.tasks.encode, kind)) and spec.dim
    }
    named = profile_in_id(name, config)
    if named is None:
        default = config.default_profile_name
        profiles = {
            profile: {"is_default": profile == default, **_profile_outputs(config, profile)}
            for profile in (config.profiles or {"default": 0})
        }
    else:
        profiles = {"default": {"is_default": True, **_profile_outputs(config, named)}}
    return {
        "name": name or config.sie_id,
        "inputs": inputs,
        "outputs": outputs,
        "dims": dims,
        "loaded": model_state == ModelState.LOADED,
        "state": _STATE_NAMES[model_state],
        "last_error": {"code": "MODEL_LOAD_FAILED", "message": error} if error else None,
        "max_sequence_length": config.max_sequence_length,
        "profiles": profiles,
        "supported": True,
        "unsupported_profiles": (config.refused_profiles or None) if named is None else None,
        **placement_info(state, slot),
        "instance": instance,
    }


def _profile_outputs(config: ModelConfig, profile: str) -> dict[str, Any]:
    if profile not in config.profiles:
        return {}
    runtime = config.profiles[profile].adapter_options.runtime
    shown = {"output_types": runtime.output_types, "output_similarity": runtime.output_similarity}
    return {key: value for key, value in shown.items() if value is not None}


def unsupported_info(model: UnsupportedModel, instance: str) -> dict[str, Any]:
    """A model file this server read but cannot serve: listed with the reason, never loadable. Its
    state is the contract's terminal `failed` (clients know it), and `supported: false` says why."""
    return {
        "name": model.sie_id,
        "inputs": [],
        "outputs": [],
        "dims": {},
        "loaded": False,
        "state": "failed",
        "last_error": {"code": "MODEL_LOAD_FAILED", "message": model.reason},
        "supported": False,
        "unsupported_reason": model.reason,
        "source": model.source,
        "instance": instance,
    }


def _json(payload: Any) -> Response:
    return Response(msgspec.json.encode(payload), media_type="application/json")


async def list_models(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    state.refresh_catalog()
    instance = request.app.state.instance
    served = [
        model_info(state, config, instance, name)
        for config in state.catalog.active_models()
        for name in (config.sie_id, *_profile_ids(state, config))
    ]
    unsupported = [unsupported_info(u, instance) for u in state.catalog.unsupported.values()]
    return _json({"models": served + unsupported})


async def get_model(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    name = request.path_params["model"]
    state.refresh_catalog()
    if name in state.catalog.unsupported:
        return _json(unsupported_info(state.catalog.unsupported[name], request.app.state.instance))
    _, config = state.model(name)
    return _json(model_info(state, config, request.app.state.instance, name))


def _profile_ids(state: FrontendState, config: ModelConfig) -> list[str]:
    """`<id>:<profile>` of each served profile not called `default` (SIE's variant ids), unless
    declared as a model of its own."""
    ids = [f"{config.sie_id}:{p}" for p in config.profiles if p != "default"]
    return [name for name in ids if name not in state.catalog]
