"""DonutAdapter through the device path (ring messages, batcher, runner), with the frontend's
page preparation, prompt and post-processing, against transformers' DonutProcessor +
VisionEncoderDecoderModel.generate (called as SIE calls it, one page at a time) + batch_decode +
token2json on the same weights: the same tokens, sequences and fields, exactly."""

from __future__ import annotations

import functools
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from sie.frontend.donut import DonutText, prompt_of
from sie.frontend.donut_json import token2json
from sie.frontend.media.donut import page_spec, prepare_page
from sie.frontend.media.images import decode_image
from sie.frontend.target import config_key
from sie.gpu_proc.adapters import load_adapter
from sie.gpu_proc.adapters.donut import DonutAdapter
from sie.gpu_proc.batcher import Batcher
from sie.gpu_proc.runner import Runner
from sie.model_config import parse_model_config
from sie.shm.layout import Op, ResultKind, TokenBatch, decode_request, encode_request, mask_of
from tests import media_samples as samples
from tests.tiny_models.donut import MAX_POSITIONS, make_donut, model_yaml_donut, reference

# Pages of several shapes (portrait, landscape, square, smaller than the page).
IMAGES = [
    samples.jpeg(120, 90),
    samples.jpeg(50, 150, seed=2),
    samples.jpeg(30, 30, seed=3),
    samples.jpeg(200, 60, seed=5),
]
# Prompts of three lengths: they share device batches and run apart inside the adapter.
PROMPTS = [("<s_cord-v2>", None), ("<s_docvqa>", "what is the total?"), ("<s_docvqa>", "the tea price")]

pytestmark = pytest.mark.usefixtures("deterministic_torch")

Job = tuple[bytes, str, str | None]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_donut(tmp_path_factory.mktemp("donut"))


@pytest.fixture(scope="module")
def adapter(folder: Path) -> DonutAdapter:
    loaded = load_adapter(parse_model_config(model_yaml_donut("tiny/donut", folder)), folder, "cpu")
    assert isinstance(loaded, DonutAdapter)
    return loaded


@pytest.fixture(scope="module")
def text(folder: Path) -> DonutText:
    return DonutText.for_model(folder, folder / "tokenizer.json")


def message(folder: Path, text: DonutText, req_id: int, job: Job, max_new: int) -> TokenBatch:
    """What the frontend sends for one page: its prepared pixels and the prompt's tokens."""
    image, task, question = job
    page = prepare_page(decode_image(image, None, 10**8, "Item 0 image 0").pixels, page_spec(folder), 10**8)
    prompt = text.encode(prompt_of(task, question))
    return TokenBatch(
        req_id=req_id,
        op=Op.EXTRACT,
        model_slot=0,
        offsets=np.array([0, len(prompt)], np.int32),
        input_ids=prompt,
        output_mask=mask_of({ResultKind.TOKENS}),
        config_key=config_key("default", f"n={max_new}"),
        pixels=page[None],
        scalar=float(max_new),
    )


def generate(
    adapter: DonutAdapter, folder: Path, text: DonutText, jobs: list[Job], max_new: int
) -> list[list[int]]:
    """Every job as its own message into one batcher, batches run until it is empty."""
    batcher = Batcher(max_batch_requests=64, max_pending_items=10_000, max_batch_tokens=lambda _: 10**9)
    for req_id, job in enumerate(jobs):
        request = message(folder, text, req_id, job, max_new)
        assert batcher.try_add(decode_request(encode_request(request)), source=0, now=0.0)
    tokens: dict[int, list[int]] = {}
    n_batches = 0
    while (batch := batcher.next_batch(now=0.0, idle=True)) is not None:
        n_batches += 1
        output = Runner(torch.device("cpu")).run(adapter, batch)[ResultKind.TOKENS]
        assert output.row_offsets is not None
        for i, item in enumerate(batch.items):
            rows = output.values[output.row_offsets[i] : output.row_offsets[i + 1], 0]
            tokens[item.req_id] = rows.astype(np.int64).tolist()
    assert n_batches == 1  # pages of every prompt length went through one batch
    return [tokens[i] for i in range(len(jobs))]


@functools.cache
def cached_reference(folder: Path) -> tuple[Any, Any]:
    return reference(folder)


def reference_sequence(folder: Path, job: Job, max_new: int) -> list[int]:
    """SIE's call: one page, its prompt, greedy, the unknown token banned, SIE's length settings."""
    image, task, question = job
    processor, model = cached_reference(folder)
    pixels = processor(Image.open(io.BytesIO(image)).convert("RGB"), return_tensors="pt").pixel_values
    prompt = processor.tokenizer(prompt_of(task, question), add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            pixels,
            decoder_input_ids=prompt.input_ids,
            max_length=model.decoder.config.max_position_embeddings,
            max_new_tokens=max_new,
            pad_token_id=processor.tokenizer.pad_token_id,
            eos_token_id=processor.tokenizer.eos_token_id,
            use_cache=True,
            bad_words_ids=[[processor.tokenizer.unk_token_id]],
            return_dict_in_generate=True,
            num_beams=1,
        )
    return [int(t) for t in out.sequences[0].tolist()]


def reference_fields(folder: Path, sequence: list[int]) -> tuple[str, Any]:
    """SIE's post-processing on transformers' decode: the cleaned sequence and token2json's fields."""
    processor, _ = cached_reference(folder)
    decoded = processor.batch_decode([sequence])[0]
    decoded = decoded.replace(processor.tokenizer.eos_token, "").replace(processor.tokenizer.pad_token, "")
    cleaned = re.sub(r"<s_\w+>", "", decoded, count=1).strip()
    return cleaned, processor.token2json(cleaned)


def test_generations_match_transformers(adapter: DonutAdapter, folder: Path, text: DonutText) -> None:
    jobs = [(image, task, question) for image in IMAGES for task, question in PROMPTS]
    got = generate(adapter, folder, text, jobs, max_new=20)
    ended = 0
    for job, tokens in zip(jobs, got, strict=True):
        prompt = text.encode(prompt_of(job[1], job[2])).tolist()
        want = reference_sequence(folder, job, 20)
        assert prompt + tokens == want
        ended += tokens[-1:] == [2] and len(tokens) < 20
        cleaned, fields = reference_fields(folder, want)
        assert text.sequence(np.asarray(prompt), tokens) == cleaned
        assert token2json(cleaned, text.added) == fields
    assert ended and ended < len(jobs)  # some rows ended early, beside rows still generating


def test_max_new_tokens_bounds_the_generation(adapter: DonutAdapter, folder: Path, text: DonutText) -> None:
    jobs = [(image, "<s_cord-v2>", None) for image in IMAGES]
    got = generate(adapter, folder, text, jobs, max_new=3)
    for job, tokens in zip(jobs, got, strict=True):
        assert [text.encode("<s_cord-v2>").tolist()[0], *tokens] == reference_sequence(folder, job, 3)
        assert len(tokens) <= 3


def test_a_generation_stops_at_the_decoder_positions(
    adapter: DonutAdapter, folder: Path, text: DonutText
) -> None:
    question = "what is the total price of the ice cream and the tea"
    prompt = text.encode(prompt_of("<s_docvqa>", question))
    room = MAX_POSITIONS - len(prompt)
    assert 0 < room < 500
    [tokens] = generate(adapter, folder, text, [(IMAGES[0], "<s_docvqa>", question)], max_new=500)
    # What transformers gives when asked for no more than the positions hold.
    assert prompt.tolist() + tokens == reference_sequence(folder, (IMAGES[0], "<s_docvqa>", question), room)
