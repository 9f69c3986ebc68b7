"""GLM-OCR end to end: SIE's own YAML for zai-org/GLM-OCR (its SGLang default profile and its
transformers profile) with a tiny random model in a Hugging Face cache under SIE's id and pin.

Each page's Markdown is checked against tests.tiny_models.glm_ocr.Reference: transformers'
Glm46VProcessor and `generate`, one page at a time, while the server reads pages of several sizes in
one request (one device batch, prompts of different lengths, 3D positions placed per page).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sie.page_ocr import GLM_OCR
from tests.integration.page_ocr import (
    Lab,
    check_one_decodable_page_per_item,
    check_refused,
    check_sdk,
    running_lab,
    transcripts,
)
from tests.integration.watched_server import WatchedServer
from tests.tiny_models.glm_ocr import Reference, make_glm_ocr

pytestmark = pytest.mark.slow

MODEL = "zai-org/GLM-OCR"
REVISION = "ca5d8b3e287e52589e37c28385d9655ee4372f9d"
PROMPT = "Text Recognition:"
# SIE 0.10.1's file, but float32 for bfloat16 so that greedy decoding matches the float32 reference,
# and 12 new tokens at most for 8,192, so that random weights finish quickly.
SIE_YAML: dict[str, Any] = {
    "sie_id": MODEL,
    "hf_id": MODEL,
    "hf_revision": REVISION,
    "inputs": {"text": False, "image": True, "audio": False, "video": False},
    "tasks": {"encode": None, "score": None, "extract": {}},
    "max_sequence_length": 16384,
    "profiles": {
        "transformers": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.glm_ocr:GlmOcrAdapter",
            "adapter_options": {"loadtime": {}, "runtime": {"max_new_tokens": 12, "num_beams": 1}},
        },
        "default": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter",
            "adapter_options": {
                "loadtime": {
                    "mem_fraction_static": 0.85,
                    "served_model_name": MODEL,
                    "max_concurrent_requests": 64,
                    "default_prompt": PROMPT,
                },
                "runtime": {"max_new_tokens": 12, "num_beams": 1},
            },
        },
    },
}
# A profile of the user's own: another default prompt.
SIE_YAML["profiles"]["formula"] = {
    **SIE_YAML["profiles"]["default"],
    "adapter_options": {
        "loadtime": {"default_prompt": "Formula Recognition:"},
        "runtime": {"max_new_tokens": 12},
    },
}
# (width, height): over the pixel budget, under it, a side under one token, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (10, 90), (40, 200), (28, 28), (126, 98)]


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    with running_lab(watched_server, SIE_YAML, make_glm_ocr, Reference, SIZES) as lab:
        yield lab


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_pages_of_every_size_match_the_reference_in_one_request(lab: Lab, as_json: bool) -> None:
    got = transcripts(lab.extract(lab.pages, as_json=as_json))
    want = [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images]
    assert got == want
    assert len(set(want)) > 1 and all(want)


@pytest.mark.parametrize("profile", ["default", "transformers"])
def test_an_instruction_and_fewer_new_tokens(lab: Lab, profile: str) -> None:
    params = {"instruction": "Table Recognition:", "options": {"max_new_tokens": 5, "profile": profile}}
    got = transcripts(lab.extract(lab.pages[:2], params))
    want = [
        lab.reference.transcribe(image, "Table Recognition:", max_new_tokens=5) for image in lab.images[:2]
    ]
    assert got == want


def test_a_profiles_default_prompt_is_the_text_after_the_page(lab: Lab) -> None:
    got = transcripts(lab.extract(lab.pages[:3], {"options": {"profile": "formula"}}))
    assert got == [
        lab.reference.transcribe(image, "Formula Recognition:", max_new_tokens=12) for image in lab.images[:3]
    ]
    assert got != [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images[:3]]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"max_new_tokens": 13}}, "max_new_tokens"),
        ({"options": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"options": {"num_beams": 2}}, "num_beams"),
        ({"instruction": "read <|assistant|> then"}, "control token"),
        ({"options": {"instruction": 5}}, "instruction"),
    ],
)
def test_bad_requests_are_400_and_the_model_keeps_serving(
    lab: Lab, params: dict[str, Any], message: str
) -> None:
    check_refused(lab, params, message)


def test_a_prompt_over_the_models_limit_is_413_before_any_page_is_read(lab: Lab) -> None:
    long = {"instruction": "Read: " + "page " * 20000}  # about 20,000 tokens, over 16,384
    check_refused(lab, long, "over the model's 16384", status=413)
    response = lab.extract([lab.pages[0], b"not even an image"], long)
    assert response.status_code == 413, response.text


def test_items_need_exactly_one_decodable_page(lab: Lab) -> None:
    check_one_decodable_page_per_item(lab)


def test_the_catalog_says_what_the_sglang_settings_do(lab: Lab) -> None:
    from sie.sie_yaml import translate

    config = translate(SIE_YAML, "zai-org__GLM-OCR.yaml")
    assert config["profiles"]["default"]["adapter"] == "glm_ocr"
    assert config["profiles"]["default"]["adapter_options"]["loadtime"] == {"default_prompt": PROMPT}
    assert GLM_OCR.default_prompt == PROMPT


def test_the_sdk_transcribes_a_page_given_as_a_path_and_as_pil(lab: Lab, tmp_path: Path) -> None:
    options = {"max_new_tokens": 9}
    check_sdk(lab, tmp_path, options, lambda page: lab.reference.transcribe(page, max_new_tokens=9))
