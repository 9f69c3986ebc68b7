"""The batcher with images and audio: cost 1 per image or window, never a batch of two modalities.
Pure: no torch, explicit clocks."""

from __future__ import annotations

import numpy as np

from sie.gpu_proc.batcher import Batcher
from sie.shm.layout import Op, OutputMask, TokenBatch


def images(n: int, req_id: int = 1, config_key: int = 0) -> TokenBatch:
    return TokenBatch(
        req_id=req_id,
        op=Op.ENCODE,
        model_slot=0,
        offsets=np.zeros(n + 1, np.int32),
        input_ids=np.zeros(0, np.int32),
        output_mask=OutputMask.DENSE,
        config_key=config_key,
        pixels=np.arange(n * 4 * 4 * 3, dtype=np.uint8).reshape(n, 4, 4, 3),
    )


def texts(lengths: list[int], req_id: int = 2) -> TokenBatch:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return TokenBatch(
        req_id=req_id,
        op=Op.ENCODE,
        model_slot=0,
        offsets=offsets,
        input_ids=np.arange(offsets[-1], dtype=np.int32),
        output_mask=OutputMask.DENSE,
    )


def audio(windows: list[int], prompt: list[int], temperature: float = 0.0) -> TokenBatch:
    n = len(windows)
    return TokenBatch(
        req_id=3,
        op=Op.EXTRACT,
        model_slot=1,
        offsets=(np.arange(n + 1) * len(prompt)).astype(np.int32),
        input_ids=np.tile(np.asarray(prompt, np.int32), n),
        output_mask=OutputMask.TOKENS,
        samples=np.arange(sum(windows), dtype=np.float32),
        sample_offsets=np.concatenate([[0], np.cumsum(windows)]).astype(np.int32),
        scalar=temperature,
    )


def test_an_image_costs_one() -> None:
    batcher = Batcher(max_batch_requests=100, max_batch_tokens=lambda slot: 3)
    assert batcher.try_add(images(7), source=0, now=0.0)
    sizes = []
    while (batch := batcher.next_batch(now=1.0, idle=True)) is not None:
        sizes.append(len(batch.items))
        assert batch.n_tokens == len(batch.items)
        assert all(item.media is not None and item.media.shape == (4, 4, 3) for item in batch.items)
    assert sizes == [3, 3, 1]


def test_pixels_stay_with_their_item() -> None:
    request = images(5)
    batcher = Batcher()
    batcher.try_add(request, source=0, now=0.0)
    batch = batcher.next_batch(now=0.0, idle=True)
    assert batch is not None and request.pixels is not None
    for item in batch.items:
        assert item.media is not None
        np.testing.assert_array_equal(item.media, request.pixels[item.item_index])


def test_text_and_images_of_one_model_never_share_a_batch() -> None:
    batcher = Batcher(max_batch_requests=100)
    batcher.try_add(texts([5, 9, 2]), source=0, now=0.0)
    batcher.try_add(images(4), source=1, now=0.0)
    first = batcher.next_batch(now=1.0, idle=True)
    second = batcher.next_batch(now=1.0, idle=True)
    assert first is not None and second is not None and batcher.next_batch(now=1.0, idle=True) is None
    assert {item.media is None for item in first.items} == {True}
    assert {item.media is None for item in second.items} == {False}
    assert (first.n_tokens, second.n_tokens) == (16, 4)


def test_audio_windows_carry_their_samples_prompt_and_temperature() -> None:
    batcher = Batcher(max_batch_requests=100, max_batch_tokens=lambda slot: 2)
    batcher.try_add(audio([30, 30, 12], prompt=[7, 8], temperature=0.5), source=0, now=0.0)
    batch = batcher.next_batch(now=0.0, idle=True)
    assert batch is not None and len(batch.items) == 2 and batch.n_tokens == 2
    first = batch.items[0]
    assert first.media is not None and first.media.tolist() == list(range(30))
    assert first.input_ids.tolist() == [7, 8] and first.scalar == 0.5
    rest = batcher.next_batch(now=0.0, idle=True)
    assert rest is not None and rest.items[0].media is not None and len(rest.items[0].media) == 12


def test_dropping_a_frontend_recounts_media_costs() -> None:
    batcher = Batcher(max_batch_requests=100, max_batch_tokens=lambda slot: 4)
    batcher.try_add(images(3, req_id=1), source=0, now=0.0)
    batcher.try_add(images(3, req_id=2), source=1, now=0.0)
    assert batcher.drop_source(0) == 3
    batch = batcher.next_batch(now=0.0, idle=True)
    assert batch is not None and [item.req_id for item in batch.items] == [2, 2, 2] and batch.n_tokens == 3
