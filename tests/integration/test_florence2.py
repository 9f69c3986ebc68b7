"""Florence-2 (tiny, random weights) end to end on a real server, in transformers' folder layout and
in microsoft's original one, over HTTP in msgpack and JSON: each task's answer is transformers'
Florence2Processor + Florence2ForConditionalGeneration.generate + post_process_generation on the
same image bytes and weights, in SIE's response shape; bad requests are 400s in the contract's
shape while the good ones beside them are served."""

from __future__ import annotations

import base64
import concurrent.futures
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import media_samples as samples
from tests.boxes import bbox_matches
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, post
from tests.tiny_models.florence2 import (
    make_florence2,
    make_florence2_original,
    model_yaml_florence2,
    reference_answer,
    reference_generate,
    reference_model,
    reference_processor,
)

pytestmark = pytest.mark.slow

NATIVE, ORIGINAL = "tiny/florence2", "tiny/florence2-original"
IMAGES = [samples.jpeg(120, 90), samples.png_rgba(70, 150), samples.jpeg(333, 200, seed=3)]
MAX_NEW_TOKENS = 24  # the tiny models' profile (model_yaml_florence2)
# (params, the prompt transformers' processor is given, the task its answer is parsed as)
ASKED = [
    ({}, "<OD>", "<OD>"),  # the profile's task
    ({"options": {"task": "<OCR_WITH_REGION>"}}, "<OCR_WITH_REGION>", "<OCR_WITH_REGION>"),
    ({"options": {"task": "<OCR>"}}, "<OCR>", "<OCR>"),
    ({"instruction": "What is the total amount?"}, "<DocVQA>What is the total amount?", "<DocVQA>"),
    ({"instruction": "<CAPTION>"}, "<CAPTION>", "<CAPTION>"),
    (
        {"labels": ["a cat", "red car"], "options": {"task": "<CAPTION_TO_PHRASE_GROUNDING>"}},
        "<CAPTION_TO_PHRASE_GROUNDING>a cat, red car",
        "<CAPTION_TO_PHRASE_GROUNDING>",
    ),
    ({"options": {"task": "<REGION_PROPOSAL>", "num_beams": 2}}, "<REGION_PROPOSAL>", "<REGION_PROPOSAL>"),
]

Florence = tuple[Server, dict[str, Path]]


@pytest.fixture(scope="module")
def florence(tmp_path_factory: pytest.TempPathFactory, watched_server: WatchedServer) -> Iterator[Florence]:
    root = tmp_path_factory.mktemp("florence2_server")
    native = make_florence2(root / "weights" / "native")
    folders = {NATIVE: native, ORIGINAL: make_florence2_original(root / "weights" / "original", native)}
    for sie_id, folder in folders.items():
        watched_server.add(model_yaml_florence2(sie_id, folder))
        watched_server.wait_serving(f"/v1/extract/{sie_id}", {"items": [image_item(IMAGES[0], as_json=True)]})
    yield watched_server.server, folders


def extract(url: str, model: str, items: list[dict[str, Any]], as_json: bool = False, **params: Any) -> Any:
    return post(url, f"/v1/extract/{model}", {"items": items, "params": params}, as_json=as_json, timeout=120)


def image_item(data: bytes, as_json: bool = False) -> dict[str, Any]:
    return {"images": [{"data": base64.b64encode(data).decode() if as_json else data}]}


def assert_served_as_transformers(entry: dict[str, Any], want: Any) -> None:
    """One item of the response against the processor's parsed answer, in SIE's shape."""
    assert entry["classifications"] == [] and entry["relations"] == [] and entry["data"] == {}
    if isinstance(want, str):
        assert entry["objects"] == [] and [(e["text"], e["score"]) for e in entry["entities"]] == [
            (want, 1.0)
        ]
        return
    if "quad_boxes" in want:
        assert entry["objects"] == [] and [e["text"] for e in entry["entities"]] == want["labels"]
        for entity, quad in zip(entry["entities"], want["quad_boxes"], strict=True):
            xs, ys = quad[0::2], quad[1::2]
            assert entity["label"] == "text" and bbox_matches(
                entity["bbox"], [min(xs), min(ys), max(xs), max(ys)]
            )
        return
    assert entry["entities"] == []
    assert [o["label"] for o in entry["objects"]] == [label or "object" for label in want["labels"]]
    for found, box in zip(entry["objects"], want["bboxes"], strict=True):
        assert set(found) == {"label", "score", "bbox"} and found["score"] == 1.0
        assert found["bbox"][:2] == box[:2] and bbox_matches(found["bbox"], box)


@pytest.mark.parametrize("model", [NATIVE, ORIGINAL])
@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_answers_match_transformers(florence: Florence, model: str, as_json: bool) -> None:
    server, folders = florence
    processor = reference_processor(folders[model], original=model == ORIGINAL)
    reference = reference_model(folders[NATIVE])  # the original folder holds the same weights
    answered = 0
    for params, prompt, task in ASKED:
        response = extract(server.url, model, [image_item(d, as_json) for d in IMAGES], as_json, **params)
        assert response.status_code == 200, response.text
        beams = params.get("options", {}).get("num_beams", 1)
        for entry, image in zip(decode(response)["items"], IMAGES, strict=True):
            ids, size = reference_generate(
                processor, reference, image, prompt, max_new_tokens=MAX_NEW_TOKENS, num_beams=beams
            )
            want = reference_answer(processor, ids, task, size)
            assert_served_as_transformers(entry, want)
            answered += bool(entry["objects"] or any(e["text"] for e in entry["entities"]))
    assert answered > len(IMAGES)  # the tiny model's answers are not all empty


def test_text_answers_carry_sies_labels(florence: Florence) -> None:
    server, _ = florence
    labels = {}
    for params, _, task in ASKED[2:5]:
        [entry] = decode(extract(server.url, NATIVE, [image_item(IMAGES[0])], **params))["items"]
        labels[task] = entry["entities"][0]["label"]
    assert labels == {"<OCR>": "text", "<DocVQA>": "answer", "<CAPTION>": "caption"}


def test_the_item_text_is_the_question(florence: Florence) -> None:
    server, _ = florence
    item = {**image_item(IMAGES[0]), "text": "What is the invoice date?"}
    [entry] = decode(extract(server.url, NATIVE, [item], options={"task": "<DocVQA>"}))["items"]
    [asked] = decode(
        extract(server.url, NATIVE, [image_item(IMAGES[0])], instruction="What is the invoice date?")
    )["items"]
    assert entry == asked and entry["entities"][0]["label"] == "answer"


BAD: list[tuple[list[dict[str, Any]], dict[str, Any], str]] = [
    ([image_item(IMAGES[0])], {"options": {"task": "<SEGMENT>"}}, "is not a Florence-2 task"),
    ([image_item(IMAGES[0])], {"options": {"task": "<REGION_TO_SEGMENTATION>"}}, "is not served here"),
    ([image_item(IMAGES[0])], {"instruction": "<OD>only cats"}, "takes no input"),
    ([image_item(IMAGES[0])], {"labels": ["a cat"]}, "params.labels are the phrases"),
    ([image_item(IMAGES[0])], {"options": {"task": "<DocVQA>"}}, "needs its question"),
    ([image_item(IMAGES[0])], {"options": {"max_new_tokens": 4096}}, "max_new_tokens must be an integer"),
    ([image_item(IMAGES[0])], {"options": {"num_beams": 0}}, "num_beams must be an integer"),
    ([image_item(IMAGES[0])], {"options": {"temperature": 0.5}}, "Unsupported options for Florence-2"),
    ([image_item(IMAGES[0])], {"instruction": "why? " * 200}, "Item 0: the prompt has"),
    ([{"images": []}], {}, "Item 0 has no images"),
    ([{"text": "What is the total?"}], {}, "Item 0 has text, which model"),
    ([image_item(IMAGES[0]), {"images": [{"data": b"not an image"}]}], {}, "Item 1 image 0"),
    ([{"images": [{"data": IMAGES[0]}] * 2}], {}, "Florence-2 reads one image per item"),
]


def test_bad_input_is_a_400_and_the_rest_is_served(florence: Florence) -> None:
    server, _ = florence
    good = [image_item(d) for d in IMAGES]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        served = [pool.submit(extract, server.url, NATIVE, good) for _ in range(3)]
        refused = [pool.submit(extract, server.url, ORIGINAL, items, **params) for items, params, _ in BAD]
        for future, (_, _, message) in zip(refused, BAD, strict=True):
            response = future.result()
            assert response.status_code == 400, response.text
            detail = response.json()["detail"]
            assert detail["code"] == "INVALID_INPUT" and message in detail["message"], detail
        answers = [decode(future.result())["items"] for future in served]
    assert all(len(items) == len(IMAGES) for items in answers)
    for items in answers[1:]:  # each request alone or beside the others: the same answer
        for a, b in zip(items, answers[0], strict=True):
            assert [o["label"] for o in a["objects"]] == [o["label"] for o in b["objects"]]
            for box_a, box_b in zip(a["objects"], b["objects"], strict=True):
                assert max(abs(x - y) for x, y in zip(box_a["bbox"], box_b["bbox"], strict=True)) <= 1


def test_sdk_extract_answers_as_transformers(florence: Florence, tmp_path: Path) -> None:
    """sie-sdk's extract of an image for OCR and for the profile's <OD>, one run of the real client."""
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folders = florence
    file = tmp_path / "page.jpg"
    file.write_bytes(IMAGES[0])  # encoded bytes: the SDK sends them unchanged
    item = {"images": [{"bytes": str(file)}]}
    asked = [ASKED[2], ASKED[0]]  # <OCR> (a text entity), <OD> (objects with boxes)
    actions = [{"op": "extract", "model": NATIVE, "items": item, "kwargs": params} for params, _, _ in asked]
    processor, reference = reference_processor(folders[NATIVE]), reference_model(folders[NATIVE])
    for entry, (_, prompt, task) in zip(run_sdk(server.url, actions), asked, strict=True):
        ids, size = reference_generate(
            processor, reference, IMAGES[0], prompt, max_new_tokens=MAX_NEW_TOKENS, num_beams=1
        )
        result = ok(entry)
        result.setdefault("data", {})  # the SDK leaves out an empty data
        assert_served_as_transformers(result, reference_answer(processor, ids, task, size))
        assert result["objects"] or result["entities"][0]["text"]  # the tiny model answers something
