"""The encode task's entry: every item of an encode request to the path that embeds it.

A family with its own encode runner (sie.families: `encode_runner`, ColPali's pages) takes every
item; otherwise text items go through `tasks/encode.py` and image items through `tasks/images.py`,
both at once, and their vectors come back in request order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.encode import Embedded, EmbedOptions, embed_texts
from sie.frontend.tasks.images import ImageVectors, embed_images
from sie.frontend.wire import Item

# What a family's `encode_runner` names (sie.families).
EncodeRunner = Callable[[FrontendState, Target, Sequence[Item], list[str], EmbedOptions], Awaitable[Embedded]]


async def embed(
    state: FrontendState, target: Target, items: Sequence[Item], texts: list[str], options: EmbedOptions
) -> Embedded:
    """Image items through the image tower, the others (`texts[i]`) through `embed_texts`, in order."""
    runner: EncodeRunner | None = target.family.encode_function()
    if runner is not None:  # a family that encodes its items itself
        return await runner(state, target, items, texts, options)
    image_at = [i for i, item in enumerate(items) if item.images]
    if not image_at:
        return await embed_texts(state, target, texts, options)
    text_at = [i for i, item in enumerate(items) if not item.images]
    normalize = target.runtime.normalize if options.normalize is None else options.normalize
    pictures = embed_images(
        state, target, image_at, [items[i].images or [] for i in image_at], normalize=normalize
    )
    if text_at:
        words, vectors = await asyncio.gather(
            embed_texts(state, target, [texts[i] for i in text_at], options), pictures
        )
    else:
        words, vectors = None, await pictures
    return _merged(len(items), image_at, vectors, text_at, words)


def _merged(
    n_items: int, image_at: list[int], vectors: ImageVectors, text_at: list[int], words: Embedded | None
) -> Embedded:
    """The image and text halves of one request as one result, each row at its item's position."""
    dense = np.empty((n_items, vectors.dense.shape[1]), np.float32)
    dense[image_at] = vectors.dense
    if words is not None and words.dense is not None:
        dense[text_at] = words.dense
    return Embedded(
        dense=dense,
        sparse=None,
        multivector=None,
        sparse_dims=0,
        input_tokens=words.input_tokens if words else 0,
        tokenization_ms=vectors.prepare_ms + (words.tokenization_ms if words else 0.0),
        queue_ms=max(vectors.queue_ms, words.queue_ms if words else 0.0),
        inference_ms=vectors.inference_ms + (words.inference_ms if words else 0.0),
        postprocessing_ms=words.postprocessing_ms if words else 0.0,
    )
