"""GroundingDinoAdapter through the device path (ring messages, batcher, runner), with the
frontend's resize, prompt and post-processing, against transformers' GroundingDinoProcessor +
GroundingDinoForObjectDetection + post_process_grounded_object_detection on the same weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from sie.frontend.grounding_dino import GroundingPrompts, Thresholds, objects_of
from sie.frontend.media.detr import resize_detr
from sie.frontend.media.images import decode_image
from sie.frontend.target import config_key
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.grounding_dino import GroundingDinoAdapter
from sie.gpu_proc.batcher import Batcher
from sie.gpu_proc.runner import Runner
from sie.media_config import image_spec
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch, decode_request, encode_request
from tests import media_samples as samples
from tests.tiny_models.grounding_dino import (
    NUM_QUERIES,
    assert_same_detections,
    make_grounding_dino,
    model_yaml_grounding_dino,
    reference_detections,
)

# Two of one size (they share a device batch), the others of their own sizes.
IMAGES = [
    samples.jpeg(120, 90),
    samples.jpeg(120, 90, seed=3),
    samples.jpeg(70, 150, seed=4),  # its long side reaches the longest edge first
    samples.jpeg(96, 96),
]
LABELS = ["a cat", "the Dog", "red leather handbag"]
OTHER = ["car", "a big tree", "person"]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_grounding_dino(tmp_path_factory.mktemp("grounding_dino"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> GroundingDinoAdapter:
    config = parse_model_config(model_yaml_grounding_dino("tiny/grounding-dino", folder))
    loaded = load_adapter(config, folder, "cpu")
    assert isinstance(loaded, GroundingDinoAdapter)
    return loaded


def message(
    folder: Path, req_id: int, image: bytes, prompt: np.ndarray
) -> tuple[TokenBatch, tuple[int, int]]:
    """What the frontend sends for one image: its resized pixels, the prompt, a size batch key."""
    decoded = decode_image(image, None, 10**8, "Item 0 image 0")
    pixels = resize_detr(decoded.pixels, image_spec(folder, "grounding_dino"))
    request = TokenBatch(
        req_id=req_id,
        op=Op.EXTRACT,
        model_slot=0,
        offsets=np.array([0, len(prompt)], np.int32),
        input_ids=prompt,
        output_mask=OutputMask.BOXES,
        config_key=config_key("default", f"{pixels.shape[0]}x{pixels.shape[1]}"),
        pixels=pixels[None],
    )
    return request, (decoded.width, decoded.height)


def detect(
    adapter: GroundingDinoAdapter, folder: Path, jobs: list[tuple[bytes, list[str]]], thresholds: Thresholds
) -> list[list[dict[str, Any]]]:
    """Every job as its own message into one batcher, batches run until it is empty."""
    prompts = GroundingPrompts.for_model(folder, folder / "tokenizer.json")
    batcher = Batcher(max_batch_requests=64, max_pending_items=10_000, max_batch_tokens=lambda _: 10**9)
    sent = []
    for req_id, (image, labels) in enumerate(jobs):
        request, size = message(folder, req_id, image, prompts.encode(labels))
        assert batcher.try_add(decode_request(encode_request(request)), source=0, now=0.0)
        sent.append((request.input_ids, size, labels))
    rows: dict[int, np.ndarray] = {}
    while (batch := batcher.next_batch(now=0.0, idle=True)) is not None:
        output = Runner(torch.device("cpu")).run(adapter, batch)[ResultKind.BOXES]
        assert output.row_offsets is not None
        for i, item in enumerate(batch.items):
            rows[item.req_id] = output.values[output.row_offsets[i] : output.row_offsets[i + 1]]
    return [
        objects_of(rows[req_id], prompt, size, labels, thresholds, prompts)
        for req_id, (prompt, size, labels) in enumerate(sent)
    ]


@pytest.mark.parametrize(("box", "text"), [(0.25, 0.25), (0.85, 0.6), (0.0, 0.7)])
def test_detections_match_transformers(
    adapter: GroundingDinoAdapter, folder: Path, box: float, text: float
) -> None:
    found = detect(adapter, folder, [(image, LABELS) for image in IMAGES], Thresholds(box, text))
    want = reference_detections(folder, IMAGES, LABELS, box, text)
    for objects, reference in zip(found, want, strict=True):
        assert_same_detections(objects, reference, LABELS)
    assert any(objects for objects in found)


def test_the_box_threshold_drops_queries(adapter: GroundingDinoAdapter, folder: Path) -> None:
    thresholds = (Thresholds(0.0, 0.0), Thresholds(0.9, 0.25))
    everything, strict = (detect(adapter, folder, [(IMAGES[0], LABELS)], t)[0] for t in thresholds)
    assert len(everything) == NUM_QUERIES  # every query at box threshold 0
    assert 0 < len(strict) < len(everything)
    assert {o["label"] for o in strict} <= set(LABELS)


def test_requests_with_other_labels_share_a_batch(adapter: GroundingDinoAdapter, folder: Path) -> None:
    jobs = [(IMAGES[0], LABELS), (IMAGES[1], OTHER), (IMAGES[0], OTHER), (IMAGES[1], ["cat"])]
    thresholds = Thresholds(0.3, 0.25)
    together = detect(adapter, folder, jobs, thresholds)
    alone = [detect(adapter, folder, [job], thresholds)[0] for job in jobs]
    for got, want in zip(together, alone, strict=True):
        assert [o["label"] for o in got] == [o["label"] for o in want]
        np.testing.assert_allclose([o["score"] for o in got], [o["score"] for o in want], atol=1e-5)
        np.testing.assert_allclose([o["corners"] for o in got], [o["corners"] for o in want], atol=1e-4)
    assert together[0] != together[2]  # same image, other labels: other objects


def test_a_batch_of_one_size_is_the_processors_batch(adapter: GroundingDinoAdapter, folder: Path) -> None:
    """Two images of one size in one processor call (no padding, pixel_mask all ones), as they
    meet in one device batch here."""
    import io

    from PIL import Image

    from tests.tiny_models.grounding_dino import reference

    processor, model = reference(folder)
    pictures = [Image.open(io.BytesIO(image)) for image in IMAGES[:2]]
    inputs = processor(images=pictures, text=[LABELS, LABELS], return_tensors="pt")
    assert bool(inputs.pixel_mask.all())
    with torch.no_grad():
        outputs = model(**inputs)
    sizes = [(p.height, p.width) for p in pictures]
    want = processor.post_process_grounded_object_detection(
        outputs, inputs.input_ids, threshold=0.85, text_threshold=0.6, target_sizes=sizes
    )
    found = detect(adapter, folder, [(image, LABELS) for image in IMAGES[:2]], Thresholds(0.85, 0.6))
    for objects, reference_objects in zip(found, want, strict=True):
        assert_same_detections(objects, reference_objects, LABELS)
