"""Owlv2Adapter through the device path, with the frontend's preprocessing and post-processing,
against transformers' processor + Owlv2ForObjectDetection + post_process_object_detection."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sie.frontend.tasks.detect import objects_of
from sie.frontend.tasks.images import ImageUnit, decode_pixels
from sie.frontend.tokenize import TextTokenizer
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.owlv2 import Owlv2Adapter
from sie.media_config import image_spec
from sie.model_config import parse_model_config
from sie.shm.layout import Op, OutputMask, ResultKind, TokenBatch
from tests import media_samples as samples
from tests.gpu_proc.device_path import device_run
from tests.tiny_models.owlv2 import TEXT_LENGTH, make_owlv2, model_yaml_owlv2, reference_detections

IMAGES = [samples.jpeg(640, 480), samples.png_rgba(50, 90), samples.jpeg(96, 200, seed=4)]
LABELS = ["a photo of a cat", "the dog", "car"]

pytestmark = pytest.mark.usefixtures("deterministic_torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_owlv2(tmp_path_factory.mktemp("owlv2"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> Owlv2Adapter:
    loaded = load_adapter(parse_model_config(model_yaml_owlv2("tiny/owlv2", folder)), folder, "cpu")
    assert isinstance(loaded, Owlv2Adapter)
    return loaded


def detect(
    adapter: Owlv2Adapter, folder: Path, jobs: list[tuple[bytes, list[str]]], threshold: float
) -> list[Any]:
    """One request of images, each with its own labels (as a batch may mix requests)."""
    tokenizer = TextTokenizer(folder / "tokenizer.json", TEXT_LENGTH)
    pixels, sizes = decode_pixels(
        [ImageUnit(i, 0, data, None) for i, (data, _) in enumerate(jobs)], image_spec(folder, "owlv2"), 10**8
    )
    ids, aux, offsets = [], [], [0]
    for _, labels in jobs:
        encoded = tokenizer.encode(labels)
        ids.append(encoded.input_ids)
        aux.append(np.repeat(np.arange(len(labels), dtype=np.int32), np.diff(encoded.offsets)))
        offsets.append(offsets[-1] + len(encoded.input_ids))
    request = TokenBatch(
        req_id=3,
        op=Op.EXTRACT,
        model_slot=0,
        offsets=np.asarray(offsets, np.int32),
        input_ids=np.concatenate(ids),
        aux=np.concatenate(aux),
        output_mask=OutputMask.BOXES,
        pixels=pixels,
    )
    output = device_run(adapter, request)[ResultKind.BOXES]
    assert output.row_offsets is not None
    bounds = output.row_offsets.tolist()
    return [
        objects_of(output.values[bounds[i] : bounds[i + 1]], sizes[i], labels, threshold)
        for i, (_, labels) in enumerate(jobs)
    ]


def assert_same_detections(got: list[dict[str, Any]], want: dict[str, Any], labels: list[str]) -> None:
    """The same objects, each matched to one of the reference's (random weights give near-equal
    scores, whose order float rounding may swap)."""
    assert len(got) == len(want["scores"]) > 0
    assert all(a["score"] >= b["score"] for a, b in itertools.pairwise(got))  # best first
    unmatched = list(
        zip([labels[int(k)] for k in want["labels"]], want["scores"], want["boxes"], strict=True)
    )
    for found in got:
        at = next(
            (
                i
                for i, (label, score, box) in enumerate(unmatched)
                if label == found["label"]
                and abs(score - found["score"]) <= 1e-5
                and np.abs(np.asarray(found["corners"]) - box).max() <= 1e-3
            ),
            None,
        )
        assert at is not None, found
        del unmatched[at]


@pytest.mark.parametrize("threshold", [0.1, 0.3])
def test_detections_match_transformers(adapter: Owlv2Adapter, folder: Path, threshold: float) -> None:
    found = detect(adapter, folder, [(image, LABELS) for image in IMAGES], threshold)
    for image, objects in zip(IMAGES, found, strict=True):
        assert_same_detections(objects, reference_detections(folder, image, LABELS, threshold), LABELS)


def test_images_with_different_labels_share_a_batch(adapter: Owlv2Adapter, folder: Path) -> None:
    other = ["car", "a tree"]
    jobs = [(IMAGES[0], LABELS), (IMAGES[1], other), (IMAGES[0], other), (IMAGES[2], LABELS)]
    together = detect(adapter, folder, jobs, 0.1)
    alone = [detect(adapter, folder, [job], 0.1)[0] for job in jobs]
    for got, want in zip(together, alone, strict=True):
        assert [o["label"] for o in got] == [o["label"] for o in want]
        np.testing.assert_allclose([o["corners"] for o in got], [o["corners"] for o in want], atol=1e-4)
    assert together[0] != together[2]  # same image, other labels: other objects


def test_boxes_are_in_the_original_image_pixels(adapter: Owlv2Adapter, folder: Path) -> None:
    [objects] = detect(adapter, folder, [(IMAGES[0], LABELS)], 0.0)
    boxes = np.asarray([o["corners"] for o in objects])
    assert len(objects) == 36  # every patch of the 96 px / 16 px input at threshold 0
    # Centres fall within the padded square, whose side is the image's longer side (640).
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    assert centres.min() >= 0 and centres.max() <= 640
    assert all(o["score"] >= p["score"] for o, p in itertools.pairwise(objects))
