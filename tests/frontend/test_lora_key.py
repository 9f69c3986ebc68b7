"""A request's LoRA adapter in its batch key: batches never mix adapters, and the device can tell."""

from __future__ import annotations

import pytest

from sie.errors import InvalidInput
from sie.frontend.target import config_key, lora_config_key
from sie.model_config import parse_model_config
from sie.shm.layout import lora_of, with_lora

CONFIG = parse_model_config({"sie_id": "m/x", "loras": {"fr": "/a/fr", "de": "/a/de", "it": "/a/it"}})


def test_each_adapter_gets_its_own_key_and_its_number_rides_in_it() -> None:
    keys = {name: lora_config_key(CONFIG, "default", name) for name in (None, "de", "fr", "it")}
    assert len(set(keys.values())) == 4
    assert keys[None] == config_key("default") and lora_of(keys[None]) == 0
    assert [lora_of(keys[n]) for n in ("de", "fr", "it")] == [1, 2, 3]  # sorted names, from 1
    assert lora_config_key(CONFIG, "fast", "fr") != keys["fr"]  # profiles still split batches


def test_the_number_does_not_disturb_the_hash_bits() -> None:
    key = config_key("default", "fr")
    assert with_lora(key, 7) & 0xFFFF_FFFF == key and lora_of(with_lora(with_lora(key, 7), 2)) == 2


def test_unknown_adapter_is_invalid_input_listing_the_known_ones() -> None:
    with pytest.raises(
        InvalidInput, match=r"Unknown LoRA adapter 'xx' for model 'm/x'\. Available: de, fr, it"
    ):
        lora_config_key(CONFIG, "default", "xx")
    with pytest.raises(InvalidInput, match="Available: none"):
        lora_config_key(parse_model_config({"sie_id": "m/y"}), "default", "fr")
