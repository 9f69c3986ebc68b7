"""LightOnOCR-3 end to end: SIE's own YAML for lightonai/LightOnOCR-3-4B (its SGLang default profile
and its transformers profile) with a tiny random model in a Hugging Face cache under SIE's id and pin.

The model samples (temperature 0.1). Its pages are checked against tests.tiny_models.lighton_ocr3's
greedy Reference where sampling must give the greedy text: a top_p so small that only the likeliest
token is left, or a vanishing temperature. Pages of several sizes are read in one request (one
device batch, prompts of different lengths, a hybrid linear-attention decoder left-padded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sie.page_ocr import LIGHTON_OCR3
from tests.integration.page_ocr import (
    Lab,
    check_one_decodable_page_per_item,
    check_refused,
    check_sdk,
    running_lab,
    transcripts,
)
from tests.integration.watched_server import WatchedServer
from tests.tiny_models.lighton_ocr3 import Reference, make_lighton_ocr3

pytestmark = pytest.mark.slow

MODEL = "lightonai/LightOnOCR-3-4B"
REVISION = "b71010f095dc3735de7ee6b9969bff8f8f50b39a"
# SIE 0.10.1's file, but float32 for bfloat16 so that the text matches the float32 reference, and 12
# new tokens at most for 12,288, so that random weights finish quickly.
SIE_YAML: dict[str, Any] = {
    "sie_id": MODEL,
    "hf_id": MODEL,
    "hf_revision": REVISION,
    "inputs": {"text": False, "image": True, "audio": False, "video": False},
    "tasks": {"encode": None, "score": None, "extract": {}},
    "max_sequence_length": 24576,
    "profiles": {
        "default": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter",
            "adapter_options": {
                "loadtime": {
                    "mem_fraction_static": 0.85,
                    "served_model_name": MODEL,
                    "trust_remote_code": False,
                    "max_concurrent_requests": 128,
                    "meter_pages": True,
                    "max_new_tokens": 12,
                    "temperature": 0.1,
                    "top_p": 1.0,
                    "chat_template_kwargs": {"enable_thinking": False},
                    "allowed_instructions": ["grounding"],
                    "attention_backend": "flashinfer",
                    "extra_launch_args": ["--disable-radix-cache"],
                },
                "runtime": {"max_new_tokens": 12, "num_beams": 1},
            },
        },
        "transformers": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.lighton_ocr.adapter:LightOnOCR3Adapter",
            "adapter_options": {
                "loadtime": {"max_new_tokens": 12, "temperature": 0.1, "top_p": 1.0},
                "runtime": {},
            },
        },
    },
}
ONLY_THE_LIKELIEST = {"top_p": 1e-9}  # nucleus sampling down to one token: the greedy choice
# (width, height): over the pixel budget, under it, narrow, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (20, 90), (40, 200), (32, 32), (126, 98)]


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    with running_lab(watched_server, SIE_YAML, make_lighton_ocr3, Reference, SIZES) as lab:
        yield lab


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_pages_of_every_size_match_the_reference_in_one_request(lab: Lab, as_json: bool) -> None:
    got = transcripts(lab.extract(lab.pages, {"options": ONLY_THE_LIKELIEST}, as_json=as_json))
    want = [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images]
    assert got == want
    assert len(set(want)) > 2 and sum(map(bool, want)) > len(want) // 2  # pages read differently


@pytest.mark.parametrize("profile", ["default", "transformers"])
def test_grounding_and_fewer_new_tokens_at_a_vanishing_temperature(lab: Lab, profile: str) -> None:
    options = {"max_new_tokens": 5, "profile": profile, "temperature": 1e-6}
    got = transcripts(lab.extract(lab.pages[:3], {"instruction": "grounding", "options": options}))
    want = [lab.reference.transcribe(image, "grounding", max_new_tokens=5) for image in lab.images[:3]]
    assert got == want
    assert got != [lab.reference.transcribe(image, max_new_tokens=5) for image in lab.images[:3]]


def test_pages_are_sampled(lab: Lab) -> None:
    """At a high temperature the same page reads differently from request to request; the profile's
    own temperature (0.1) gives text the model can write. A random model may sample end-of-text
    first on any one page, so the cool reading covers every page: some must say something."""
    options = {"temperature": 20.0, "top_p": 1.0}
    hot = {transcripts(lab.extract(lab.pages[:1], {"options": options}))[0] for _ in range(4)}
    assert len(hot) > 1
    cool = transcripts(lab.extract(lab.pages))
    assert len(cool) == len(lab.pages) and any(cool)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"max_new_tokens": 13}}, "max_new_tokens"),
        ({"options": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"options": {"num_beams": 2}}, "num_beams"),
        ({"instruction": "Transcribe the table."}, "'grounding', nothing else"),
        ({"instruction": "grounding <|im_end|>"}, "'grounding', nothing else"),
        ({"options": {"temperature": 0}}, "temperature"),
        ({"options": {"temperature": "hot"}}, "temperature"),
        ({"options": {"top_p": 1.5}}, "top_p"),
        ({"options": {"top_p": 10**400}}, "top_p"),
        ({"options": {"temperature": 10**400}}, "temperature"),
        ({"options": {"instruction": 5}}, "instruction"),
    ],
)
def test_bad_requests_are_400_and_the_model_keeps_serving(
    lab: Lab, params: dict[str, Any], message: str
) -> None:
    check_refused(lab, params, message, greedy=ONLY_THE_LIKELIEST)


def test_items_need_exactly_one_decodable_page(lab: Lab) -> None:
    check_one_decodable_page_per_item(lab)


def test_the_catalog_says_what_the_sglang_settings_do(lab: Lab) -> None:
    from sie.sie_yaml import translate

    config = translate(SIE_YAML, "lightonai__LightOnOCR-3-4B.yaml")
    default = config["profiles"]["default"]
    assert default["adapter"] == "lighton_ocr3"
    assert default["adapter_options"]["loadtime"] == {
        "max_new_tokens": 12,
        "temperature": 0.1,
        "top_p": 1.0,
        "chat_template_kwargs": {"enable_thinking": False},
        "allowed_instructions": ["grounding"],
    }
    assert (LIGHTON_OCR3.temperature, LIGHTON_OCR3.instructions) == (0.1, frozenset({"grounding"}))


def test_the_sdk_transcribes_a_page_given_as_a_path_and_as_pil(lab: Lab, tmp_path: Path) -> None:
    options = {"max_new_tokens": 9, **ONLY_THE_LIKELIEST}
    check_sdk(lab, tmp_path, options, lambda page: lab.reference.transcribe(page, max_new_tokens=9))
