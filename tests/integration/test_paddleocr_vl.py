"""PaddleOCR-VL end to end: SIE's own YAML for PaddlePaddle/PaddleOCR-VL-1.5 (its SGLang default
profile and its transformers profile) with a tiny random model in a Hugging Face cache under SIE's id
and pin.

Each page's transcript is checked against tests.tiny_models.paddleocr_vl.Reference: transformers'
PaddleOCRVLProcessor and `generate`, one page at a time, while the server reads pages of several
sizes in one request (one device batch, prompts of different lengths, 3D positions placed per page).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sie.page_ocr import PADDLEOCR_VL
from tests.integration.page_ocr import (
    Lab,
    check_one_decodable_page_per_item,
    check_refused,
    check_sdk,
    running_lab,
    transcripts,
)
from tests.integration.watched_server import WatchedServer
from tests.tiny_models.paddleocr_vl import Reference, make_paddleocr_vl

pytestmark = pytest.mark.slow

MODEL = "PaddlePaddle/PaddleOCR-VL-1.5"
REVISION = "6819afc8509ac9afa50e91b34627a7cf8f7900bb"
TASK_PROMPTS = {
    "ocr": "OCR:",
    "table": "Table Recognition:",
    "formula": "Formula Recognition:",
    "chart": "Chart Recognition:",
    "spotting": "Spotting:",
    "seal": "Seal Recognition:",
}
LABELS = {"ocr": "markdown", "table": "markdown", "formula": "markdown", "chart": "markdown"}
LABELS |= {"spotting": "spotting", "seal": "seal"}
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
            "adapter_path": "sie_server.adapters.paddleocr_vl:PaddleOCRVLAdapter",
            "adapter_options": {
                "loadtime": {"trust_remote_code": True, "default_task": "ocr"},
                "runtime": {"task": "ocr", "max_new_tokens": 12, "num_beams": 1},
            },
        },
        "default": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.sglang_vision_extract.adapter:SGLangVisionExtractAdapter",
            "adapter_options": {
                "loadtime": {
                    "trust_remote_code": True,
                    "mem_fraction_static": 0.85,
                    "served_model_name": MODEL,
                    "max_concurrent_requests": 64,
                    "processor_use_fast": False,
                    "extra_launch_args": ["--disable-fast-image-processor"],
                    "default_task": "ocr",
                    "task_prompts": TASK_PROMPTS,
                    "task_labels": {"spotting": "spotting", "seal": "seal"},
                },
                "runtime": {"task": "ocr", "max_new_tokens": 12, "num_beams": 1},
            },
        },
    },
}
# A profile of the user's own: tables by default.
SIE_YAML["profiles"]["tables"] = {
    **SIE_YAML["profiles"]["default"],
    "adapter_options": {"loadtime": {}, "runtime": {"task": "table", "max_new_tokens": 12}},
}

# (width, height): over the pixel budget, under it, a side under one token, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (10, 90), (40, 200), (28, 28), (126, 98)]


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    with running_lab(watched_server, SIE_YAML, make_paddleocr_vl, Reference, SIZES) as lab:
        yield lab


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_pages_of_every_size_match_the_reference_in_one_request(lab: Lab, as_json: bool) -> None:
    got = transcripts(lab.extract(lab.pages, as_json=as_json))
    want = [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images]
    assert got == want
    assert len(set(want)) > 1 and all(want)


@pytest.mark.parametrize("profile", ["default", "transformers"])
def test_an_instruction_and_fewer_new_tokens(lab: Lab, profile: str) -> None:
    params = {"instruction": "Read it all.", "options": {"max_new_tokens": 5, "profile": profile}}
    got = transcripts(lab.extract(lab.pages[:2], params))
    want = [lab.reference.transcribe(image, "Read it all.", max_new_tokens=5) for image in lab.images[:2]]
    assert got == want


@pytest.mark.parametrize("task", sorted(TASK_PROMPTS))
def test_each_task_reads_with_its_prompt_and_labels_its_entity(lab: Lab, task: str) -> None:
    got = transcripts(lab.extract(lab.pages[:2], {"options": {"task": task}}), LABELS[task])
    want = [
        lab.reference.transcribe(image, TASK_PROMPTS[task], max_new_tokens=12) for image in lab.images[:2]
    ]
    assert got == want


def test_a_profiles_task_is_its_default(lab: Lab) -> None:
    got = transcripts(lab.extract(lab.pages[:3], {"options": {"profile": "tables"}}))
    want = [
        lab.reference.transcribe(image, "Table Recognition:", max_new_tokens=12) for image in lab.images[:3]
    ]
    assert got == want
    assert got != [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images[:3]]
    params = {"options": {"profile": "tables", "task": "spotting"}}
    spotted = transcripts(lab.extract(lab.pages[:1], params), "spotting")
    assert spotted == [lab.reference.transcribe(lab.images[0], "Spotting:", max_new_tokens=12)]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"max_new_tokens": 13}}, "max_new_tokens"),
        ({"options": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"options": {"num_beams": 2}}, "num_beams"),
        ({"instruction": "read <|IMAGE_PLACEHOLDER|> then"}, "control token"),
        ({"options": {"task": "layout"}}, "options.task"),
        ({"options": {"instruction": 5}}, "instruction"),
    ],
)
def test_bad_requests_are_400_and_the_model_keeps_serving(
    lab: Lab, params: dict[str, Any], message: str
) -> None:
    check_refused(lab, params, message)


def test_items_need_exactly_one_decodable_page(lab: Lab) -> None:
    check_one_decodable_page_per_item(lab)


def test_the_catalog_says_what_the_sglang_settings_do(lab: Lab) -> None:
    from sie.sie_yaml import translate

    config = translate(SIE_YAML, "PaddlePaddle__PaddleOCR-VL-1.5.yaml")
    default = config["profiles"]["default"]
    assert default["adapter"] == "paddleocr_vl"
    assert default["adapter_options"]["loadtime"] == {
        "trust_remote_code": True,
        "default_task": "ocr",
        "task_prompts": TASK_PROMPTS,
        "task_labels": {"spotting": "spotting", "seal": "seal"},
    }
    assert PADDLEOCR_VL.task_prompts == TASK_PROMPTS


def test_the_sdk_transcribes_a_page_given_as_a_path_and_as_pil(lab: Lab, tmp_path: Path) -> None:
    options = {"max_new_tokens": 9}
    check_sdk(lab, tmp_path, options, lambda page: lab.reference.transcribe(page, max_new_tokens=9))
