"""LightOnOCR-2 end to end: SIE's own YAML for lightonai/LightOnOCR-2-1B (its SGLang default profile
and its transformers profile) with a tiny random model in a Hugging Face cache under SIE's id and pin.

Each page's Markdown is checked against tests.tiny_models.lighton_ocr.Reference: transformers'
LightOnOcrProcessor and `generate`, one page at a time, while the server reads pages of several
sizes in one request (one device batch, prompts of different lengths, pages padded together).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from sie.page_ocr import LIGHTON_OCR
from tests.integration.page_ocr import (
    Lab,
    check_one_decodable_page_per_item,
    check_refused,
    check_sdk,
    png,
    running_lab,
    transcripts,
)
from tests.integration.watched_server import WatchedServer
from tests.tiny_models.lighton_ocr import Reference, make_lighton_ocr

pytestmark = pytest.mark.slow

MODEL = "lightonai/LightOnOCR-2-1B"
REVISION = "c97bd377f04481830395218fa8951df9deaba756"
SYSTEM = "You are an OCR engine. Return the markdown representation of the document."
# SIE 0.10.1's file, but float32 for bfloat16 so that greedy decoding matches the float32 reference,
# and 12 new tokens at most for 4,096, so that random weights finish quickly.
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
            "adapter_path": "sie_server.adapters.lighton_ocr.adapter:LightOnOCRAdapter",
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
                    "meter_pages": True,
                    "system_prompt": SYSTEM,
                    "extra_env": {"SIE_SGLANG_LIGHTON_OCR_COMPAT": "1"},
                },
                "runtime": {"max_new_tokens": 12, "num_beams": 1},
            },
        },
    },
}
# (width, height): wider and taller than the longest edge, odd multiples of 14, one token.
SIZES = [(100, 70), (300, 160), (40, 200), (28, 28), (126, 98)]


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    with running_lab(
        watched_server, SIE_YAML, make_lighton_ocr, lambda folder: Reference(folder, SYSTEM), SIZES
    ) as lab:
        yield lab


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_pages_of_every_size_match_the_reference_in_one_request(lab: Lab, as_json: bool) -> None:
    got = transcripts(lab.extract(lab.pages, as_json=as_json))
    want = [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images]
    assert got == want
    assert len(set(want)) > 1 and all(want)


@pytest.mark.parametrize("profile", ["default", "transformers"])
def test_an_instruction_and_fewer_new_tokens(lab: Lab, profile: str) -> None:
    params = {"instruction": "Transcribe the table.", "options": {"max_new_tokens": 5, "profile": profile}}
    got = transcripts(lab.extract(lab.pages[:2], params))
    want = [
        lab.reference.transcribe(image, instruction="Transcribe the table.", max_new_tokens=5)
        for image in lab.images[:2]
    ]
    assert got == want


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"max_new_tokens": 13}}, "max_new_tokens"),
        ({"options": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"options": {"num_beams": 2}}, "num_beams"),
        ({"instruction": "read <|im_end|> then"}, "control token"),
        ({"options": {"instruction": 5}}, "instruction"),
    ],
)
def test_bad_requests_are_400_and_the_model_keeps_serving(
    lab: Lab, params: dict[str, Any], message: str
) -> None:
    check_refused(lab, params, message)


def test_items_need_exactly_one_decodable_page(lab: Lab) -> None:
    check_one_decodable_page_per_item(lab)
    tiny = png(Image.new("RGB", (14, 14)))  # under one image token: the model would not see it
    response = lab.extract([lab.pages[0], tiny])
    assert response.status_code == 400, response.text
    assert "Item 1 image 0" in response.json()["detail"]["message"]


def test_the_catalog_says_what_the_sglang_settings_do(lab: Lab) -> None:
    from sie.sie_yaml import translate

    config = translate(SIE_YAML, "lightonai__LightOnOCR-2-1B.yaml")
    assert config["profiles"]["default"]["adapter"] == "lighton_ocr"
    assert config["profiles"]["default"]["adapter_options"]["loadtime"] == {"system_prompt": SYSTEM}
    assert LIGHTON_OCR.system_prompt == SYSTEM


def test_the_sdk_transcribes_a_page_given_as_a_path_and_as_pil(lab: Lab, tmp_path: Path) -> None:
    check_sdk(
        lab, tmp_path, {"max_new_tokens": 9}, lambda page: lab.reference.transcribe(page, max_new_tokens=9)
    )
