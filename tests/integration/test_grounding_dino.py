"""Open-set detection (tiny Grounding DINO) end to end on the media server, over HTTP in msgpack
and JSON, against transformers' processor + model + post-processing on the same bytes and weights;
bad requests are 400s in the contract's shape while the good ones beside them are served."""

from __future__ import annotations

import base64
import concurrent.futures
from pathlib import Path
from typing import Any

import pytest

from tests import media_samples as samples
from tests.integration.media_models import GROUNDING_DINO, MAX_PIXELS
from tests.integration.server import Server
from tests.integration.wire import decode, post
from tests.tiny_models.grounding_dino import assert_same_detections, reference_detections

pytestmark = pytest.mark.slow

LABELS = ["a cat", "the Dog", "red leather handbag"]
# Two of one size (one device batch) and one of another.
IMAGES = [samples.jpeg(120, 90), samples.jpeg(70, 150, seed=4), samples.jpeg(120, 90, seed=3)]

Media = tuple[Server, dict[str, Path]]


def extract(url: str, items: list[dict[str, Any]], as_json: bool = False, **params: Any) -> Any:
    body = {"items": items, "params": params}
    return post(url, f"/v1/extract/{GROUNDING_DINO}", body, as_json=as_json, timeout=120)


def image_item(data: bytes, as_json: bool = False) -> dict[str, Any]:
    return {"images": [{"data": base64.b64encode(data).decode() if as_json else data}]}


@pytest.mark.parametrize("as_json", [False, True], ids=["msgpack", "json-base64"])
def test_detections_match_transformers(media: Media, as_json: bool) -> None:
    server, folders = media
    options = {"box_threshold": 0.85, "text_threshold": 0.6}
    response = extract(
        server.url, [image_item(d, as_json) for d in IMAGES], as_json, labels=LABELS, options=options
    )
    assert response.status_code == 200, response.text
    got = decode(response)["items"]
    want = reference_detections(folders[GROUNDING_DINO], IMAGES, LABELS, 0.85, 0.6)
    for entry, reference in zip(got, want, strict=True):
        assert entry["entities"] == [] and entry["data"] == {} and entry["classifications"] == []
        assert_same_detections(entry["objects"], reference, LABELS)
        assert all(set(o) == {"label", "score", "bbox"} and len(o["bbox"]) == 4 for o in entry["objects"])
    assert any(entry["objects"] for entry in got)


def test_the_profile_thresholds_apply_by_default(media: Media) -> None:
    server, folders = media
    [entry] = decode(extract(server.url, [image_item(IMAGES[0])], labels=LABELS))["items"]
    [reference] = reference_detections(folders[GROUNDING_DINO], IMAGES[:1], LABELS, 0.25, 0.25)
    assert_same_detections(entry["objects"], reference, LABELS)


def too_big() -> bytes:
    side = int(MAX_PIXELS**0.5) + 1
    return samples.jpeg(side, side)


BAD: list[tuple[list[dict[str, Any]], dict[str, Any], str]] = [
    ([image_item(IMAGES[0])], {}, "params.labels must list at least one label"),
    ([image_item(IMAGES[0])], {"labels": []}, "params.labels must list at least one label"),
    ([image_item(IMAGES[0])], {"labels": [f"label {i}" for i in range(100)]}, "the model reads at most 256"),
    ([{"images": []}], {"labels": LABELS}, "Item 0 has no images"),
    ([{"text": "a cat"}], {"labels": LABELS}, "Item 0 has text, which model"),
    ([image_item(IMAGES[0]), image_item(too_big())], {"labels": LABELS}, "Item 1 image 0: image of"),
    ([{"images": [{"data": IMAGES[0]}] * 2}], {"labels": LABELS}, "detection reads one image per item"),
    ([image_item(IMAGES[0])], {"labels": LABELS, "options": {"box_threshold": 3}}, "box_threshold"),
]


def test_bad_input_is_a_400_and_the_rest_is_served(media: Media) -> None:
    server, _ = media
    good = [image_item(d) for d in IMAGES]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        served = [pool.submit(extract, server.url, good, labels=LABELS) for _ in range(3)]
        refused = [pool.submit(extract, server.url, items, **params) for items, params, _ in BAD]
        for future, (_, _, message) in zip(refused, BAD, strict=True):
            response = future.result()
            assert response.status_code == 400, response.text
            detail = response.json()["detail"]
            assert detail["code"] == "INVALID_INPUT" and message in detail["message"], detail
        answers = [decode(future.result())["items"] for future in served]
    assert all(len(items) == len(IMAGES) for items in answers)
    for items in answers[1:]:  # each request alone or beside the others: the same objects
        for a, b in zip(items, answers[0], strict=True):
            assert [o["label"] for o in a["objects"]] == [o["label"] for o in b["objects"]]
            # Float noise of another batch may move a truncated edge by a pixel.
            for box_a, box_b in zip(a["objects"], b["objects"], strict=True):
                assert max(abs(x - y) for x, y in zip(box_a["bbox"], box_b["bbox"], strict=True)) <= 1


def test_sdk_extract_detects_as_transformers(media: Media, tmp_path: Path) -> None:
    """sie-sdk's extract of two images with labels and thresholds, one run of the real client."""
    from tests.integration.test_sdk import SDK_PYTHON, ok, run_sdk

    if not SDK_PYTHON.exists():
        pytest.skip(f"{SDK_PYTHON} missing")
    server, folders = media
    files = []
    for i, data in enumerate(IMAGES[:2]):  # encoded bytes: the SDK sends them unchanged
        files.append(tmp_path / f"image{i}.jpg")
        files[-1].write_bytes(data)
    kwargs = {"labels": LABELS, "options": {"box_threshold": 0.85, "text_threshold": 0.6}}
    items = [{"images": [{"bytes": str(f)}]} for f in files]
    [entry] = run_sdk(
        server.url, [{"op": "extract", "model": GROUNDING_DINO, "items": items, "kwargs": kwargs}]
    )
    got = ok(entry)
    want = reference_detections(folders[GROUNDING_DINO], IMAGES[:2], LABELS, 0.85, 0.6)
    for result, reference in zip(got, want, strict=True):
        assert_same_detections(result["objects"], reference, LABELS)
    assert any(result["objects"] for result in got)
