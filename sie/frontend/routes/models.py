"""GET /v1/models and /v1/models/{model}: the catalogue and each model's state (JSON always)."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from sie.frontend.state import FrontendState
from sie.model_config import ModelConfig
from sie.shm.control import ModelState

_STATE_NAMES = {
    ModelState.AVAILABLE: "available",
    ModelState.LOADING: "loading",
    ModelState.LOADED: "loaded",
    ModelState.FAILED: "failed",
    ModelState.UNLOADING: "unloading",
}


def model_info(state: FrontendState, config: ModelConfig) -> dict[str, Any]:
    slot = state.catalog.slot(config.sie_id)
    model_state = state.devices.model_state(slot)
    error = state.devices.model_error(slot) if model_state == ModelState.FAILED else ""
    inputs = [k for k in ("text", "image", "audio", "video") if getattr(config.inputs, k)]
    outputs = config.output_types()
    if config.tasks.score is not None:
        outputs.append("score")
    if config.tasks.extract is not None:
        outputs.append("json")
    dims = {
        kind: spec.dim
        for kind in ("dense", "sparse", "multivector")
        if config.tasks.encode and (spec := getattr(config.tasks.encode, kind)) and spec.dim
    }
    default = config.default_profile_name
    return {
        "name": config.sie_id,
        "inputs": inputs,
        "outputs": outputs,
        "dims": dims,
        "loaded": model_state == ModelState.LOADED,
        "state": _STATE_NAMES[model_state],
        "last_error": {"code": "MODEL_LOAD_FAILED", "message": error} if error else None,
        "max_sequence_length": config.max_sequence_length,
        "profiles": {name: {"is_default": name == default} for name in (config.profiles or {"default": 0})},
    }


def _json(payload: Any) -> Response:
    return Response(msgspec.json.encode(payload), media_type="application/json")


async def list_models(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    return _json({"models": [model_info(state, m) for m in state.catalog.models]})


async def get_model(request: Request) -> Response:
    state: FrontendState = request.app.state.sie
    _, config = state.model(request.path_params["model"])
    return _json(model_info(state, config))
