"""Donut end to end: a real server with a tiny Donut served twice (a CORD profile and a DocVQA
profile, as SIE's two catalog models), over HTTP in msgpack and JSON and through sie-sdk, against
transformers' DonutProcessor + VisionEncoderDecoderModel.generate + batch_decode + token2json on
the same bytes and weights, turned into entities by SIE's rule; bad requests are 400s in the
contract's shape while the good ones beside them are served."""

from __future__ import annotations

import base64
import concurrent.futures
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from sie.frontend.donut import prompt_of
from sie.frontend.donut_json import entities_of
from tests import media_samples as samples
from tests.integration.server import Server
from tests.integration.watched_server import WatchedServer
from tests.integration.wire import decode, post
from tests.tiny_models.donut import make_donut, model_yaml_donut, reference

pytestmark = pytest.mark.slow

CORD, DOCVQA = "tiny/donut-cord", "tiny/donut-docvqa"
IMAGES = [samples.jpeg(120, 90), samples.jpeg(50, 150, seed=2), samples.jpeg(200, 60, seed=5)]
QUESTION = "what is the total?"
MAX_NEW = 16  # the tiny models' profile default

Served = tuple[Server, Path]


@pytest.fixture(scope="module")
def donut(tmp_path_factory: pytest.TempPathFactory, watched_server: WatchedServer) -> Iterator[Served]:
    folder = make_donut(tmp_path_factory.mktemp("donut") / "weights")
    for sie_id, task in [(CORD, "<s_cord-v2>"), (DOCVQA, "<s_docvqa>")]:
        watched_server.add(model_yaml_donut(sie_id, folder, task))
        watched_server.wait_serving(f"/v1/extract/{sie_id}", {"items": [image_item(IMAGES[0], as_json=True)]})
    yield watched_server.server, folder


def reference_entities(
    folder: Path, images: list[bytes], task: str, question: str | None, max_new: int
) -> list[Any]:
    """SIE's pipeline on transformers: each page alone, generate, batch_decode, clean, token2json."""
    processor, model = reference(folder)
    prompt = processor.tokenizer(prompt_of(task, question), add_special_tokens=False, return_tensors="pt")
    found = []
    for data in images:
        pixels = processor(Image.open(io.BytesIO(data)).convert("RGB"), return_tensors="pt").pixel_values
        with torch.no_grad():
            sequences = model.generate(
                pixels,
                decoder_input_ids=prompt.input_ids,
                max_new_tokens=max_new,
                pad_token_id=processor.tokenizer.pad_token_id,
                eos_token_id=processor.tokenizer.eos_token_id,
                bad_words_ids=[[processor.tokenizer.unk_token_id]],
                num_beams=1,
            )
        decoded = processor.batch_decode(sequences)[0].replace("</s>", "").replace("<pad>", "")
        found.append(
            entities_of(processor.token2json(re.sub(r"<s_\w+>", "", decoded, count=1).strip()), task)
        )
    return found


def extract(url: str, model: str, items: list[dict[str, Any]], as_json: bool = False, **params: Any) -> Any:
    return post(url, f"/v1/extract/{model}", {"items": items, "params": params}, as_json=as_json, timeout=120)


def image_item(data: bytes, as_json: bool = False) -> dict[str, Any]:
    return {"images": [{"data": base64.b64encode(data).decode() if as_json else data}]}


@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_cord_entities_match_transformers(donut: Served, as_json: bool) -> None:
    server, folder = donut
    response = extract(server.url, CORD, [image_item(d, as_json) for d in IMAGES], as_json)
    assert response.status_code == 200, response.text
    got = decode(response)["items"]
    want = reference_entities(folder, IMAGES, "<s_cord-v2>", None, MAX_NEW)
    for entry, entities in zip(got, want, strict=True):
        assert entry["entities"] == entities
        assert entry["data"] == {} and entry["objects"] == [] and entry["classifications"] == []
    assert any(entry["entities"] for entry in got)


def test_docvqa_reads_the_question_and_the_options(donut: Served) -> None:
    server, folder = donut
    items = [image_item(d) for d in IMAGES]
    asked = decode(extract(server.url, DOCVQA, items, instruction=QUESTION, options={"max_new_tokens": 24}))
    assert [e["entities"] for e in asked["items"]] == reference_entities(
        folder, IMAGES, "<s_docvqa>", QUESTION, 24
    )
    # The question as an option, and another task on the same model.
    by_option = decode(
        extract(server.url, DOCVQA, items, options={"instruction": QUESTION, "max_new_tokens": 24})
    )
    assert by_option["items"] == asked["items"]
    as_cord = decode(extract(server.url, DOCVQA, items, options={"task": "<s_cord-v2>"}))
    assert [e["entities"] for e in as_cord["items"]] == reference_entities(
        folder, IMAGES, "<s_cord-v2>", None, MAX_NEW
    )


def test_sdk_extract_reads_donut_entities(donut: Served, tmp_path: Path) -> None:
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folder = donut
    page = tmp_path / "page.jpg"
    page.write_bytes(IMAGES[0])
    kwargs = {"instruction": QUESTION, "options": {"max_new_tokens": 24}}
    action = {"op": "extract", "model": DOCVQA, "items": {"images": [{"path": str(page)}]}, "kwargs": kwargs}
    [entry] = run_sdk(server.url, [action])
    [want] = reference_entities(folder, IMAGES[:1], "<s_docvqa>", QUESTION, 24)
    assert ok(entry)["entities"] == want


BAD: list[tuple[str, list[dict[str, Any]], dict[str, Any], str]] = [
    (CORD, [{"text": "a receipt"}], {}, "Item 0 has text, which model"),
    (CORD, [{"images": []}], {}, "Item 0 has no images"),
    (CORD, [image_item(IMAGES[0]), {"text": "x"}], {}, "Item 1 has text, which model"),
    (CORD, [{"images": [{"data": IMAGES[0]}] * 2}], {}, "Donut reads one page per item"),
    (
        CORD,
        [{"images": [{"data": b"not an image"}]}],
        {},
        "Item 0 image 0: the bytes are not a decodable image",
    ),
    (CORD, [image_item(IMAGES[0])], {"options": {"num_beams": 4}}, "num_beams must be 1"),
    (CORD, [image_item(IMAGES[0])], {"options": {"max_new_tokens": -1}}, "max_new_tokens"),
    (CORD, [image_item(IMAGES[0])], {"labels": ["total"]}, "take no params.labels"),
    (DOCVQA, [image_item(IMAGES[0])], {"instruction": "the tea " * 40}, "reads at most 48"),
]


def test_bad_input_is_a_400_and_the_rest_is_served(donut: Served) -> None:
    server, _ = donut
    good = [image_item(d) for d in IMAGES]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        served = [pool.submit(extract, server.url, CORD, good) for _ in range(3)]
        refused = [
            pool.submit(extract, server.url, model, items, **params) for model, items, params, _ in BAD
        ]
        for future, (_, _, _, message) in zip(refused, BAD, strict=True):
            response = future.result()
            assert response.status_code == 400, response.text
            detail = response.json()["detail"]
            assert detail["code"] == "INVALID_INPUT" and message in detail["message"], detail
        answers = [decode(future.result())["items"] for future in served]
    assert all(items == answers[0] for items in answers)  # alone or beside others: the same fields
