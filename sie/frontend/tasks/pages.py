"""Encode and score for visual-document retrievers (ColPali): pages and queries as token vectors.

A text item is a query: the model's query prompt around it (`PageRecipe.queries`), one device item
of its tokens. An image is a page: decoded and resized here, sent as pixels with the prompt ids the
model reads beside them, one device item each. An item's vectors are its tokens' (text) or its
images' patches and prompt tokens, concatenated in image order (as SIE returns several pages of
one item). Where a model's pages differ in shape (ColQwen2.5 keeps each page's aspect, ColSmol cuts
it into as many tiles as it needs), each page goes as its own message, and the device batches it
with pages of its shape. MUVERA and normalization follow, as for ColBERT; `/v1/score` is MaxSim of a query's
vectors against each item's.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from sie.frontend.media.images import decode_image
from sie.frontend.media.submit import MESSAGE_SHARE, Prepared, submit_units
from sie.frontend.muvera import fde
from sie.frontend.pipeline import admit, submit, tokenize
from sie.frontend.postprocess import l2_normalize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.embed import EncodeRunner
from sie.frontend.tasks.encode import Embedded, EmbedOptions
from sie.frontend.tasks.images import ImageUnit, image_units
from sie.frontend.tasks.score import Scored, maxsim_scored
from sie.frontend.tokenize import Encoded
from sie.frontend.wire import ImageInput, Item
from sie.shm.layout import Op, ResultKind, TokenBatch, mask_of

_KINDS = {ResultKind.MULTIVECTOR}


@dataclass(frozen=True, slots=True)
class Page:
    """One image as the device takes it: pixels and the prompt ids read beside them."""

    pixels: np.ndarray  # [H, W, 3] uint8, at the model's size
    input_ids: np.ndarray  # int32, the image placeholders included


class PageRecipe(Protocol):
    """An architecture's prompts and image processing (sie.frontend.colpali, colqwen2, colsmol)."""

    @property
    def one_size(self) -> bool:
        """Every page has the same pixel shape (else each page goes as its own message, and the
        device batches it with pages of its shape only)."""
        ...

    def queries(self, texts: Sequence[str]) -> Encoded: ...

    def page(self, pixels: np.ndarray, where: str) -> Page: ...

    def unit_bytes(self) -> int: ...  # the most bytes of one page (pixels and ids)


def encode_prompts(tokenizer: Tokenizer, prompts: Sequence[str], *, add_special_tokens: bool) -> Encoded:
    """Queries in their model's prompt, tokenized into the flat layout (no padding)."""
    encodings = tokenizer.encode_batch_fast(list(prompts), add_special_tokens=add_special_tokens)
    return Encoded.from_rows([e.ids for e in encodings])


def split_prompt(tokenizer: Tokenizer, prompt: str, image_token: str) -> tuple[np.ndarray, np.ndarray, int]:
    """A page prompt's ids before and after its one image placeholder (a special token, which the
    tokenizer splits on, so what surrounds it tokenizes alone), and the placeholder's id."""
    image_id = tokenizer.token_to_id(image_token)
    if image_id is None:
        raise ValueError(f"the tokenizer has no image token {image_token!r}")
    ids = tokenizer.encode(prompt, add_special_tokens=True).ids
    if ids.count(image_id) != 1:
        raise ValueError(f"the page prompt {prompt!r} does not tokenize to one {image_token!r}")
    at = ids.index(image_id)
    return np.asarray(ids[:at], np.int32), np.asarray(ids[at + 1 :], np.int32), image_id


@dataclass(frozen=True, slots=True)
class _Part:
    vectors: list[np.ndarray]  # per item of the part, [tokens, dim] as the device gave them
    input_tokens: int
    prepare_ms: float
    queue_ms: float
    inference_ms: float


async def embed_pages(
    state: FrontendState,
    target: Target,
    items: Sequence[Item],
    texts: list[str],
    options: EmbedOptions,
    recipe: PageRecipe,
) -> Embedded:
    """Multi-vectors (and MUVERA's dense) of every item: images as pages, the others as queries."""
    image_at = [i for i, item in enumerate(items) if item.images]
    text_at = [i for i, item in enumerate(items) if not item.images]
    pictures = [items[i].images or [] for i in image_at]
    parts = await asyncio.gather(
        _queries(state, target, [texts[i] for i in text_at], recipe),
        _pages(state, target, image_at, pictures, recipe),
    )
    started = time.perf_counter()
    raw: list[np.ndarray] = [np.empty(0)] * len(items)
    for positions, part in zip((text_at, image_at), parts, strict=True):
        for i, vectors in zip(positions, part.vectors, strict=True):
            raw[i] = vectors
    normalize = target.runtime.normalize if options.normalize is None else options.normalize
    multivector = [l2_normalize(m) for m in raw] if normalize else raw
    wanted = set(options.output_types)
    dense = None
    if "dense" in wanted and options.muvera is not None:
        dense = fde(multivector, is_query=options.is_query, params=options.muvera)
    return Embedded(
        dense=dense,
        sparse=None,
        multivector=multivector if "multivector" in wanted else None,
        sparse_dims=0,
        input_tokens=sum(part.input_tokens for part in parts),
        tokenization_ms=sum(part.prepare_ms for part in parts),
        queue_ms=max(part.queue_ms for part in parts),
        inference_ms=sum(part.inference_ms for part in parts),
        postprocessing_ms=(time.perf_counter() - started) * 1000,
    )


async def _queries(state: FrontendState, target: Target, texts: list[str], recipe: PageRecipe) -> _Part:
    if not texts:
        return _Part([], 0, 0.0, 0.0, 0.0)
    admit(state, target, len(texts))
    encoded, tokenization_ms = await tokenize(lambda: recipe.queries(texts), len(texts))
    submitted = await submit(state, target, encoded, op=Op.ENCODE, kinds=_KINDS)
    vectors = submitted.results.ragged[ResultKind.MULTIVECTOR]
    return _Part(vectors, encoded.n_tokens, tokenization_ms, submitted.queue_ms, submitted.inference_ms)


async def _pages(
    state: FrontendState,
    target: Target,
    positions: list[int],
    images: list[list[ImageInput]],
    recipe: PageRecipe,
) -> _Part:
    if not positions:
        return _Part([], 0, 0.0, 0.0, 0.0)
    units = image_units(positions, images, state.settings.max_images_per_item)
    admit(state, target, len(units))
    slot, key = target.slot, target.batch_key()
    max_pixels = state.settings.max_image_pixels
    unit_bytes = recipe.unit_bytes()
    if not recipe.one_size:  # one page a message: a message's pixels have one shape
        unit_bytes = max(unit_bytes, state.settings.request_ring_bytes // MESSAGE_SHARE)

    def prepare(part: Sequence[ImageUnit]) -> Prepared:
        pages = [
            recipe.page(decode_image(u.data, u.format, max_pixels, u.where).pixels, u.where) for u in part
        ]
        return Prepared(_page_batch(pages, slot, key), [None] * len(pages))

    submitted = await submit_units(state, units, unit_bytes, prepare)
    per_image = [m for results, _ in submitted.parts for m in results.ragged[ResultKind.MULTIVECTOR]]
    by_item: dict[int, list[np.ndarray]] = {}
    for unit, matrix in zip(units, per_image, strict=True):  # units run item by item, image by image
        by_item.setdefault(unit.item, []).append(matrix)
    vectors = [np.concatenate(by_item[position]) for position in positions]
    return _Part(vectors, 0, submitted.prepare_ms, submitted.queue_ms, submitted.inference_ms)


def _page_batch(pages: list[Page], slot: int, key: int) -> TokenBatch:
    """The pages as one request; its key also carries their shape, so a device batch holds pages of
    one shape (the low 32 bits: the LoRA adapter's bits above stay as they are)."""
    key ^= zlib.crc32(str(pages[0].pixels.shape).encode())
    lengths = np.array([len(page.input_ids) for page in pages], np.int32)
    offsets = np.zeros(len(pages) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return TokenBatch(
        req_id=0,
        op=Op.ENCODE,
        model_slot=slot,
        offsets=offsets,
        input_ids=np.concatenate([page.input_ids for page in pages]).astype(np.int32),
        output_mask=mask_of(_KINDS),
        config_key=key,
        pixels=np.stack([page.pixels for page in pages]),
    )


async def score_pages(state: FrontendState, target: Target, query: Item, items: list[Item]) -> Scored:
    """MaxSim of the query's vectors (its text, or its images) against each item's."""
    runner: EncodeRunner = target.family.encode_function()
    options = EmbedOptions(output_types=("multivector",), normalize=True)
    admit(state, target, len(items))  # one load order and one answer when the model is not ready
    query_side, item_side = await asyncio.gather(  # both on the device at once
        runner(state, target, [query], [query.text or ""], replace(options, is_query=True)),
        runner(state, target, items, [item.text or "" for item in items], options),
    )
    return maxsim_scored(query_side, item_side)
