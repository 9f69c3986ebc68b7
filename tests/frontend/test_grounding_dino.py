"""Grounding DINO's frontend half against transformers: the resize (with the device's
normalization, against GroundingDinoImageProcessorPil's pixel_values), the prompt's tokens, the
phrase decoding, SIE's label naming, and the request checks."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from sie.errors import InvalidInput
from sie.frontend.grounding_dino import GroundingPrompts, canonical_label
from sie.frontend.media.detr import resize_detr, resized_hw
from sie.frontend.media.images import decode_image
from sie.frontend.tasks.ground import thresholds_of
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.media_config import image_spec
from sie.model_config import RuntimeOptions
from tests import media_samples as samples
from tests.tiny_models.grounding_dino import write_tokenizer

SIZES = [(640, 480), (480, 640), (1000, 700), (2000, 300), (300, 2000), (800, 800), (97, 33), (1333, 800)]
LABELS = ["A Cat", "  the dog ", "red leather handbag", "remote control"]


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gd_tokenizer")
    write_tokenizer(folder)
    (folder / "config.json").write_text('{"max_text_len": 24}')
    return folder


@pytest.fixture(scope="module")
def prompts(tokenizer_folder: Path) -> GroundingPrompts:
    return GroundingPrompts.for_model(tokenizer_folder, tokenizer_folder / "tokenizer.json")


def reference_tokenizer(folder: Path) -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(folder)


@pytest.mark.parametrize(("shortest", "longest"), [(800, 1333), (96, 160)])
def test_resized_sizes_are_transformers(shortest: int, longest: int) -> None:
    from transformers.image_transforms import get_size_with_aspect_ratio

    for height in range(1, 2200, 37):
        for width in (1, 5, 64, 333, 799, 800, 801, 1333, 1500, 2100):
            want = get_size_with_aspect_ratio((height, width), shortest, longest)
            assert resized_hw(height, width, shortest, longest) == want, (height, width)


@pytest.mark.parametrize("configured", [True, False])
def test_pixels_match_the_processor(tmp_path: Path, configured: bool) -> None:
    """Resize here, normalize as the device does: the processor's pixel_values, atol 1e-5. A
    folder without preprocessor_config.json gets the processor's defaults (800 / 1333)."""
    import transformers

    processor = transformers.GroundingDinoImageProcessorPil()
    if configured:
        processor.save_pretrained(tmp_path)
    spec = image_spec(tmp_path, "grounding_dino")
    assert (spec.kind, spec.shortest_edge, spec.longest_edge) == ("detr", 800, 1333)
    normalizer = PixelNormalizer(spec, torch.device("cpu"))
    for width, height in SIZES:
        data = samples.jpeg(width, height, seed=width)
        pixels = resize_detr(decode_image(data, None, 10**8, "Item 0 image 0").pixels, spec)
        ours = normalizer(torch.from_numpy(np.ascontiguousarray(pixels[None])), torch.float32)
        want = processor(Image.open(io.BytesIO(data)), return_tensors="pt")
        assert ours.shape == want.pixel_values.shape, (width, height)
        np.testing.assert_allclose(ours.numpy(), want.pixel_values.numpy(), atol=1e-5)
        assert bool(want.pixel_mask.all())  # one image alone: no padding, as each device batch


def test_prompt_tokens_are_the_processors(prompts: GroundingPrompts, tokenizer_folder: Path) -> None:
    import transformers

    processor = transformers.GroundingDinoProcessor(
        image_processor=transformers.GroundingDinoImageProcessorPil(),
        tokenizer=reference_tokenizer(tokenizer_folder),
    )
    for labels in (LABELS[:2], ["cat"], ["Remote Control", "a big tree"]):
        want = processor(text=labels, return_tensors="np").input_ids[0]
        np.testing.assert_array_equal(prompts.encode(labels), want)


def test_a_prompt_over_the_models_text_length_is_refused(prompts: GroundingPrompts) -> None:
    assert len(prompts.encode(LABELS)) <= 24
    with pytest.raises(InvalidInput, match="prompt of 28 tokens; the model reads at most 24"):
        prompts.encode(LABELS * 2)


def test_phrases_decode_as_transformers(prompts: GroundingPrompts, tokenizer_folder: Path) -> None:
    reference = reference_tokenizer(tokenizer_folder)
    ids = prompts.encode(LABELS).tolist()
    rng = np.random.default_rng(0)
    picks = [[], ids[1:4], ids[-3:], [ids[3], ids[3], ids[3]]]
    picks += [sorted(rng.choice(ids, size=k).tolist()) for k in (2, 5, 9)]
    for pick in picks:
        assert prompts.phrase(pick) == reference.decode(pick), pick


@pytest.mark.parametrize(
    ("phrase", "want"),
    [
        ("red handbag", "Red Handbag"),  # every word of it, and the most words
        ("handbag", "Handbag"),  # all of "Handbag" beats half of "Red Handbag"
        ("leather handbag", "Handbag"),
        ("a cat. the dog.", "a cat"),  # a tie: the earlier label
        ("dog [SEP]", "the dog"),
        ("...", "..."),  # no shared word: the phrase itself
        ("", ""),
    ],
)
def test_objects_are_named_by_the_label_their_phrase_covers(phrase: str, want: str) -> None:
    labels = ["a cat", "Red Handbag", "Handbag", "the dog", "..."]
    assert canonical_label(phrase, labels) == want


def test_thresholds_come_from_the_request_then_the_profile() -> None:
    assert thresholds_of({}, RuntimeOptions()) == thresholds_of({"box_threshold": 0.25}, RuntimeOptions())
    profile = RuntimeOptions(threshold=0.4, text_threshold=0.3)
    assert (thresholds_of({}, profile).box, thresholds_of({}, profile).text) == (0.4, 0.3)
    chosen = thresholds_of({"box_threshold": 0.1, "text_threshold": 0.9}, profile)
    assert (chosen.box, chosen.text) == (0.1, 0.9)
    assert thresholds_of({"threshold": 0.2}, profile).box == 0.2  # OWLv2's name for it
    for bad in ({"box_threshold": 2}, {"text_threshold": "high"}, {"box_threshold": True}):
        with pytest.raises(InvalidInput, match="must be a number between 0 and 1"):
            thresholds_of(bad, profile)
