"""A request's target: model, profile and LoRA adapter resolved once; MaxSim's two sides at once."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from sie.catalog import Catalog
from sie.errors import InvalidInput, ModelNotFound
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, bind, resolve
from sie.frontend.tasks import score as score_task
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.model_config import parse_model_config
from sie.settings import Settings
from tests.frontend.test_app import FakeDevices

COLBERT = parse_model_config(
    {
        "sie_id": "m/colbert",
        "tasks": {"encode": {"multivector": {"dim": 4}}},
        "loras": {"fr": "/a/fr"},
        "profiles": {
            "default": {"adapter": "colbert"},
            "fast": {"adapter": "colbert", "adapter_options": {"runtime": {"query_template": "q: {text}"}}},
        },
        "refused_profiles": {"banking": "runtime.lora_id: not loaded by profile here"},
    }
)


@pytest.fixture
def state() -> FrontendState:
    devices = FakeDevices(Catalog([COLBERT]))
    return FrontendState(settings=Settings(), catalog=devices.catalog, devices=devices)


def test_a_target_holds_the_profile_the_request_named_or_the_default(state: FrontendState) -> None:
    default = resolve(state, "m/colbert")
    assert default.profile_name == "default" and default.profile is COLBERT.profiles["default"]
    fast = resolve(state, "m/colbert", "fast", "fr")
    assert fast.profile_name == "fast" and fast.lora == "fr"
    assert fast.format(["x"], is_query=True) == ["q: x"]
    assert fast.batch_key() != resolve(state, "m/colbert", "fast").batch_key()  # adapters never mix


def test_unknown_model_profile_or_adapter_is_answered_before_any_work(state: FrontendState) -> None:
    with pytest.raises(ModelNotFound):
        resolve(state, "m/nope")
    with pytest.raises(
        InvalidInput, match=r"Unknown profile 'slow' for model 'm/colbert'\. Available: default, fast"
    ):
        bind("m/colbert", 0, COLBERT, "slow", None)
    with pytest.raises(
        InvalidInput, match="Profile 'banking' of model 'm/colbert' is not served here: runtime"
    ):
        bind("m/colbert", 0, COLBERT, "banking", None)
    with pytest.raises(InvalidInput, match="Unknown LoRA adapter 'de'"):
        bind("m/colbert", 0, COLBERT, None, "de")


def test_maxsim_sends_the_query_and_the_items_together(
    state: FrontendState, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_flight: list[bool] = []
    both = asyncio.Event()

    async def embed_texts(
        state: FrontendState, target: Target, texts: list[str], options: EmbedOptions
    ) -> Any:
        in_flight.append(options.is_query)
        if len(in_flight) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), timeout=2)  # the query alone would wait here forever
        vectors = [np.eye(4, dtype=np.float32)[: i + 1] for i in range(len(texts))]
        return Embedded(None, None, vectors, 0, len(texts), 0.0, 1.0, 2.0, 0.0)

    monkeypatch.setattr(score_task, "embed_texts", embed_texts)
    scored = asyncio.run(score_task.score(state, resolve(state, "m/colbert"), "q", ["a", "b"]))
    assert sorted(in_flight) == [False, True]
    np.testing.assert_allclose(scored.scores, [1.0, 1.0])
    assert scored.input_tokens == 3 and scored.inference_ms == 4.0
