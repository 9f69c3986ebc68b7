"""MinerU2.5 end to end: SIE's own YAML for opendatalab/MinerU2.5-Pro-2604-1.2B with a tiny random
model in a Hugging Face cache under SIE's id and pin.

Each page's transcript is checked against tests.tiny_models.mineru_vl.Reference: transformers'
Qwen2VLProcessor and greedy `generate` with no 100-token verbatim repeat, one page at a time, while
the server reads pages of several sizes in one request (one device batch, prompts of different
lengths, 3D positions placed per page).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sie.page_ocr import MINERU_VL
from tests.integration.page_ocr import (
    Lab,
    check_one_decodable_page_per_item,
    check_refused,
    check_sdk,
    running_lab,
    transcripts,
)
from tests.integration.watched_server import WatchedServer
from tests.tiny_models.mineru_vl import Reference, make_mineru_vl

pytestmark = pytest.mark.slow

MODEL = "opendatalab/MinerU2.5-Pro-2604-1.2B"
REVISION = "d3f5e08d073c21466bbabe21c71bb1e9c2e595da"
TASK_PROMPTS = {
    "[default]": "\nText Recognition:",
    "table": "\nTable Recognition:",
    "equation": "\nFormula Recognition:",
    "image": "\nImage Analysis:",
    "chart": "\nImage Analysis:",
    "[layout]": "\nLayout Detection:",
}
LABELS = {task: f"mineru_{task.strip('[]').replace('default', 'text')}" for task in TASK_PROMPTS}
# SIE 0.10.1's file, but float32 for bfloat16 so that greedy decoding matches the float32 reference,
# and 12 new tokens at most for 4,096 (400 in a profile of the test's own), so that random weights
# finish quickly.
SIE_YAML: dict[str, Any] = {
    "sie_id": MODEL,
    "hf_id": MODEL,
    "hf_revision": REVISION,
    "inputs": {"text": False, "image": True, "audio": False, "video": False},
    "tasks": {"encode": None, "score": None, "extract": {}},
    "profiles": {
        "default": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.mineru_vl:MinerUVLAdapter",
            "adapter_options": {
                "loadtime": {"default_task": "[default]"},
                "runtime": {"task": "[default]", "max_new_tokens": 12, "num_beams": 1},
            },
        },
        "long": {
            "max_batch_tokens": 16384,
            "compute_precision": "float32",
            "adapter_path": "sie_server.adapters.mineru_vl:MinerUVLAdapter",
            "adapter_options": {"loadtime": {}, "runtime": {"max_new_tokens": 400}},
        },
    },
}

# (width, height): over the pixel budget, under it, narrow, tall, square, odd sides.
SIZES = [(100, 70), (300, 160), (20, 90), (40, 200), (28, 28), (126, 98)]


@pytest.fixture(scope="module")
def lab(watched_server: WatchedServer) -> Iterator[Lab]:
    with running_lab(watched_server, SIE_YAML, make_mineru_vl, Reference, SIZES, label="mineru_text") as lab:
        yield lab


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "msgpack"])
def test_pages_of_every_size_match_the_reference_in_one_request(lab: Lab, as_json: bool) -> None:
    got = transcripts(lab.extract(lab.pages, as_json=as_json), lab.label)
    want = [lab.reference.transcribe(image, max_new_tokens=12) for image in lab.images]
    assert got == want
    assert len(set(want)) > 1 and all(want)


def test_an_instruction_and_fewer_new_tokens(lab: Lab) -> None:
    params = {"instruction": "Read it all.", "options": {"max_new_tokens": 5}}
    got = transcripts(lab.extract(lab.pages[:2], params), lab.label)
    want = [lab.reference.transcribe(image, "Read it all.", max_new_tokens=5) for image in lab.images[:2]]
    assert got == want


@pytest.mark.parametrize("task", sorted(TASK_PROMPTS))
def test_each_task_reads_with_its_prompt_and_labels_its_entity(lab: Lab, task: str) -> None:
    got = transcripts(lab.extract(lab.pages[:2], {"options": {"task": task}}), LABELS[task])
    want = [
        lab.reference.transcribe(image, TASK_PROMPTS[task], max_new_tokens=12) for image in lab.images[:2]
    ]
    assert got == want


def test_no_100_token_run_is_repeated_verbatim(lab: Lab) -> None:
    """Two pages whose 400-token greedy transcripts repeat a 100-token run without the guard."""
    images = [lab.images[4], lab.images[5]]
    got = transcripts(lab.extract([lab.pages[4], lab.pages[5]], {"options": {"profile": "long"}}), lab.label)
    assert got == [lab.reference.transcribe(image, max_new_tokens=400) for image in images]
    assert got != [
        lab.reference.transcribe(image, max_new_tokens=400, no_repeat_ngram_size=None) for image in images
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"options": {"max_new_tokens": 13}}, "max_new_tokens"),
        ({"options": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"options": {"num_beams": 2}}, "num_beams"),
        ({"instruction": "read <|image_pad|> then"}, "control token"),
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

    config = translate(SIE_YAML, "opendatalab__MinerU2.5-Pro-2604-1.2B.yaml")
    default = config["profiles"]["default"]
    assert default["adapter"] == "mineru_vl"
    assert default["adapter_options"]["loadtime"] == {"default_task": "[default]"}
    assert default["adapter_options"]["runtime"]["task"] == "[default]"
    assert MINERU_VL.task_prompts == TASK_PROMPTS


def test_the_sdk_transcribes_a_page_given_as_a_path_and_as_pil(lab: Lab, tmp_path: Path) -> None:
    options = {"max_new_tokens": 9}
    check_sdk(lab, tmp_path, options, lambda page: lab.reference.transcribe(page, max_new_tokens=9))
