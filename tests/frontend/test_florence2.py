"""Florence-2's frontend half against transformers' Florence2Processor, for both folder layouts:
the task prompts and their tokens, the pixels (with the device's normalization), the decoding of
generated ids, and every served task's parsing (post_process_generation); then SIE's prompt
resolution and the request checks."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from sie.errors import InvalidInput
from sie.frontend.florence2 import (
    DOCVQA,
    GROUNDING,
    SERVED,
    TASKS_WITH_INPUT,
    TASKS_WITHOUT_INPUT,
    Florence2Text,
    generation_of,
    item_prompt,
    model_prompt,
)
from sie.frontend.florence2_parse import answer_of
from sie.frontend.media.images import decode_image, preprocess
from sie.frontend.routes.extract import wire_object
from sie.gpu_proc.adapters.clip import PixelNormalizer
from sie.media_config import image_spec
from sie.model_config import RuntimeOptions
from tests import media_samples as samples
from tests.boxes import bbox_matches
from tests.tiny_models.florence2 import (
    IMAGE_SIDE,
    make_florence2,
    make_florence2_original,
    reference_answer,
    reference_processor,
)

LAYOUTS = ["native", "original"]
SIZES = [(640, 480), (97, 33), (1000, 1000), (333, 777)]
TEXTS = [
    "<OCR>",
    "<OD>",
    "<CAPTION_TO_PHRASE_GROUNDING>a cat, the dog",
    "<CAPTION_TO_PHRASE_GROUNDING>   padded phrase  ",
    "<DocVQA>What is the total amount?",
    "<REGION_TO_OCR><loc_1><loc_2><loc_3><loc_4>",
    "a plain question",
    "<OD>and more",
    "what about <CAPTION>",
]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    native = make_florence2(tmp_path_factory.mktemp("florence2"))
    original = make_florence2_original(tmp_path_factory.mktemp("florence2_original"), native)
    return {"native": native, "original": original}


@pytest.fixture(scope="module", params=LAYOUTS)
def layout(request: pytest.FixtureRequest, folders: dict[str, Path]) -> tuple[Florence2Text, Any]:
    folder = folders[request.param]
    spec = image_spec(folder, "florence2")
    ours = Florence2Text.for_model(folder, folder / "tokenizer.json", spec)
    return ours, reference_processor(folder, original=request.param == "original")


def test_prompts_are_the_processors() -> None:
    from transformers import Florence2Processor

    construct = Florence2Processor._construct_prompts
    holder = type("Holder", (), {"task_prompts_without_inputs": TASKS_WITHOUT_INPUT})()
    holder.task_prompts_with_input = TASKS_WITH_INPUT  # type: ignore[attr-defined]
    for text in TEXTS:
        try:
            want = construct(holder, text)[0]  # type: ignore[arg-type]
        except ValueError:
            with pytest.raises(InvalidInput, match="takes no input"):
                model_prompt(text)
            continue
        assert model_prompt(text) == want, text


def test_prompt_tables_are_the_processors(layout: tuple[Florence2Text, Any]) -> None:
    _, processor = layout
    assert processor.task_prompts_without_inputs == TASKS_WITHOUT_INPUT
    assert processor.task_prompts_with_input == TASKS_WITH_INPUT


def test_prompt_tokens_are_the_processors(layout: tuple[Florence2Text, Any]) -> None:
    ours, processor = layout
    picture = Image.new("RGB", (20, 20))
    assert ours.image_tokens == processor.num_image_tokens
    for text in TEXTS:
        try:
            prompt = model_prompt(text)
        except InvalidInput:
            continue
        want = processor(text=text, images=picture, return_tensors="pt")["input_ids"][0].tolist()
        assert want[: ours.image_tokens] == [processor.image_token_id] * ours.image_tokens
        assert ours.prompt_ids(prompt, "Item 0").tolist() == want[ours.image_tokens :], text


def test_a_prompt_the_encoder_cannot_hold_is_refused(layout: tuple[Florence2Text, Any]) -> None:
    ours, _ = layout
    with pytest.raises(InvalidInput, match="Item 3: the prompt has"):
        ours.prompt_ids("the total amount " * 80, "Item 3")


@pytest.mark.parametrize("size", SIZES)
def test_pixels_match_the_processor(folders: dict[str, Path], size: tuple[int, int]) -> None:
    spec = image_spec(folders["original"], "florence2")
    assert (spec.height, spec.width) == (IMAGE_SIDE, IMAGE_SIDE)
    data = samples.jpeg(*size)
    pixels = preprocess(decode_image(data, None, 10**8, "Item 0 image 0").pixels, spec)
    ours = PixelNormalizer(spec, torch.device("cpu"))(torch.from_numpy(pixels[None].copy()), torch.float32)
    processor = reference_processor(folders["original"], original=True)
    want = processor.image_processor(Image.open(io.BytesIO(data)), return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(ours, want, atol=1e-6, rtol=0)


def test_generated_ids_decode_as_the_processor(layout: tuple[Florence2Text, Any]) -> None:
    ours, processor = layout
    rng = np.random.default_rng(0)
    vocab = ours.tokenizer.get_vocab_size(with_added_tokens=True)
    for _ in range(200):
        ids = [2, 0, *rng.integers(3, vocab, int(rng.integers(0, 30))).tolist(), 2]
        assert ours.text(ids) == processor.batch_decode([ids], skip_special_tokens=False)[0]


def generated_texts(ours: Florence2Text, seed: int) -> list[str]:
    """Answers shaped as the model writes them: phrases and location runs, OCR lines, pronouns,
    markers, stray text; and random token runs decoded."""
    rng = np.random.default_rng(seed)
    words = ["a cat", "the dog", "it", "red car", "Total 42", "the image", " spaced ", "café", "a"]

    def locs(n: int) -> str:
        return "".join(f"<loc_{int(b)}>" for b in rng.integers(0, 1000, n))

    texts = [
        "</s><s>a cat" + locs(4) + "the dog" + locs(8) + "it" + locs(4) + "</s>",
        "</s><s>" + locs(8) + "red car" + locs(4) + "</s>",
        "</s><s>Total 42" + locs(8) + "invoice" + locs(8) + "x" + locs(3) + "</s>",
        "</s><s><od>a cat</od>" + locs(4) + "<ground>the dog" + locs(4) + "<obj>" + locs(4) + "</s>",
        "</s><s>A green car parked in front of a building.</s>",
        "</s><s>café<pad>" + locs(4) + "</s><pad>",
    ]
    for _ in range(40):
        pieces = [str(rng.choice(words)) + locs(int(rng.choice([3, 4, 5, 8, 9]))) for _ in range(4)]
        texts.append("</s><s>" + "".join(pieces) + "</s>")
    vocab = ours.tokenizer.get_vocab_size(with_added_tokens=True) - 1  # no <image>
    texts += [ours.text([2, 0, *rng.integers(4, vocab, 30).tolist(), 2]) for _ in range(40)]
    return texts


@pytest.mark.parametrize("task", sorted(SERVED))
def test_answers_parse_as_post_process_generation(layout: tuple[Florence2Text, Any], task: str) -> None:
    ours, processor = layout
    for n, text in enumerate(generated_texts(ours, seed=len(task))):
        size = SIZES[n % len(SIZES)]
        want = processor.post_process_generation(text, task=task, image_size=size)[task]
        got = answer_of(text, task, size, ours.rules)
        assert_same_answer(got.entities, got.objects, want, task)


def assert_same_answer(
    entities: list[dict[str, Any]], objects: list[dict[str, Any]], want: Any, task: str
) -> None:
    """Ours against the processor's parsed answer: texts and labels equal, every corner truncated
    to the processor's whole pixel, and the wire boxes SIE's truncation of ours."""
    if isinstance(want, str):
        assert objects == [] and [(e["text"], e["score"]) for e in entities] == [(want, 1.0)]
        return
    if "quad_boxes" in want:
        assert objects == [] and [e["text"] for e in entities] == want["labels"]
        for entity, quad in zip(entities, want["quad_boxes"], strict=True):
            xs, ys = quad[0::2], quad[1::2]
            assert entity["label"] == "text" and entity["score"] == 1.0
            assert bbox_matches(entity["bbox"], [min(xs), min(ys), max(xs), max(ys)])
            assert entity["bbox"][:2] == [min(xs), min(ys)]
        return
    assert entities == []
    assert [o["label"] for o in objects] == [label or "object" for label in want["labels"]], task
    for found, box in zip(objects, want["bboxes"], strict=True):
        assert [int(v) for v in found["corners"]] == box and found["score"] == 1.0
        assert bbox_matches(wire_object(found)["bbox"], box)


def test_some_parsed_answers_hold_boxes(layout: tuple[Florence2Text, Any]) -> None:
    ours, _ = layout
    texts = generated_texts(ours, seed=1)
    assert any(answer_of(t, "<OD>", (640, 480), ours.rules).objects for t in texts)
    assert any(answer_of(t, "<OCR_WITH_REGION>", (640, 480), ours.rules).entities for t in texts)
    assert any(answer_of(t, GROUNDING, (640, 480), ours.rules).objects for t in texts)


def test_the_parse_rules_are_the_processors(layout: tuple[Florence2Text, Any]) -> None:
    ours, processor = layout
    rules = processor.post_processor
    assert ours.rules.banned_phrases == rules.banned_grounding_tokens
    assert ours.rules.ocr_area_threshold == rules.parse_task_config["ocr"].get("AREA_THRESHOLD", 0.0)


def test_reference_answer_matches_on_a_generated_sequence(layout: tuple[Florence2Text, Any]) -> None:
    ours, processor = layout
    ids = [2, 0, *ours.prompt_ids("a cat", "Item 0").tolist()[1:-1], 404, 405, 406, 407, 2]
    got = answer_of(ours.text(ids), "<OD>", (640, 480), ours.rules)
    want = reference_answer(processor, ids, "<OD>", (640, 480))
    assert_same_answer(got.entities, got.objects, want, "<OD>")


# SIE's prompt resolution (sie_server's resolve_florence2_prompt), and this server's additions.
CAPTION_OF = "Locate the phrases in the caption: "
RESOLVED = [
    (("<OD>", None, None, None), ("<OD>", "Locate the objects with category name in the image.")),
    (("<OD>", "  <CAPTION>  ", None, None), ("<CAPTION>", "What does the image describe?")),
    (("<OD>", "What is the total?", None, None), (DOCVQA, "<DocVQA>What is the total?")),
    (("<OD>", "<UNKNOWN>x", None, None), (DOCVQA, "<DocVQA><UNKNOWN>x")),
    ((DOCVQA, None, None, "  the date? "), (DOCVQA, "<DocVQA>the date?")),
    ((DOCVQA, "the total?", None, "the date?"), (DOCVQA, "<DocVQA>the total?")),
    ((GROUNDING, None, ["a cat", "the dog"], "ignored"), (GROUNDING, CAPTION_OF + "a cat, the dog")),
    ((GROUNDING, None, None, "a red car"), (GROUNDING, CAPTION_OF + "a red car")),
    (("<OD>", f"{GROUNDING} a cat ", None, None), (GROUNDING, CAPTION_OF + "a cat")),
    (("<OD>", "", None, "text is ignored"), ("<OD>", "Locate the objects with category name in the image.")),
]  # fmt: skip


@pytest.mark.parametrize(("given", "want"), RESOLVED)
def test_prompts_resolve_as_sie(given: tuple[Any, ...], want: tuple[str, str]) -> None:
    resolved = item_prompt(*given)
    assert (resolved.task, resolved.prompt) == want


REFUSED = [
    (("<OD>", None, ["a cat"], None), "params.labels are the phrases"),
    ((DOCVQA, None, None, None), "needs its question"),
    ((GROUNDING, None, None, "  "), "needs its phrases"),
    (("<OD>", "<REGION_TO_OCR><loc_1><loc_2><loc_3><loc_4>", None, None), "is not served here"),
    (("<OD>", "<OD> cats only", None, None), "takes no input"),
]


@pytest.mark.parametrize(("given", "message"), REFUSED)
def test_prompts_sie_cannot_answer_are_refused(given: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        item_prompt(*given)


def test_generation_settings_come_from_the_request_then_the_profile() -> None:
    profile = RuntimeOptions(task="<OCR>", max_new_tokens=1024, num_beams=3)
    assert generation_of({}, profile, 1024) == (g := generation_of({}, profile, 1024))
    assert (g.task, g.max_new_tokens, g.num_beams) == ("<OCR>", 1023, 3)  # held to the decoder's positions
    asked = generation_of(
        {"task": "<OD>", "max_new_tokens": 7, "num_beams": 1, "profile": "default"}, profile, 64
    )
    assert (asked.task, asked.max_new_tokens, asked.num_beams) == ("<OD>", 7, 1)
    with pytest.raises(InvalidInput, match="the profile's task '<BAD>' is not a Florence-2 task"):
        generation_of({}, RuntimeOptions(task="<BAD>"), 64)
    default = generation_of({}, RuntimeOptions(), 4096)
    assert (default.task, default.max_new_tokens, default.num_beams) == ("<OCR_WITH_REGION>", 1024, 1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"task": "OD"}, "is not a Florence-2 task"),
        ({"task": "<REFERRING_EXPRESSION_SEGMENTATION>"}, "is not served here"),
        ({"task": 3}, "is not a Florence-2 task"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer from 1 to 63"),
        ({"max_new_tokens": 64}, "max_new_tokens must be an integer from 1 to 63"),
        ({"max_new_tokens": True}, "max_new_tokens"),
        ({"num_beams": 9}, "num_beams must be an integer from 1 to 8"),
        ({"num_beams": 1.5}, "num_beams"),
        ({"threshold": 0.5}, "Unsupported options for Florence-2: threshold"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        generation_of(options, RuntimeOptions(task="<OD>"), 64)
