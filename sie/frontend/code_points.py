"""Tokenization for weightless models (SIE's fake): one token per Unicode code point, as SIE's fake
counts them. A batch is one UTF-32 encode of its joined texts: no Python work per token."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sie.frontend.tokenize import Encoded, _longest_first


class CodePointTokenizer:
    """Texts truncated to `max_length` code points; pairs truncated longest-first, as tokenizers does."""

    def __init__(self, max_length: int) -> None:
        self.max_length = max_length

    def encode(self, texts: Sequence[str]) -> Encoded:
        cut = [text[: self.max_length] for text in texts]
        lengths = np.fromiter(map(len, cut), np.int32, len(cut))
        return _encoded(cut, lengths, None)

    def encode_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> Encoded:
        """(query, doc) pairs: the query's code points with token type 0, then the doc's with 1."""
        if len(queries) != len(docs):
            raise ValueError("queries and docs must have the same length")
        pieces: list[str] = []
        for query, doc in zip(queries, docs, strict=True):
            keep_query, keep_doc = _longest_first(len(query), len(doc), self.max_length)
            pieces += (query[:keep_query], doc[:keep_doc])
        sides = np.fromiter(map(len, pieces), np.int32, len(pieces))
        types = np.repeat(np.tile(np.array([0, 1], np.int8), len(queries)), sides)
        return _encoded(
            pieces, sides.reshape(-1, 2).sum(axis=1, dtype=np.int32), types if types.any() else None
        )


def _encoded(pieces: list[str], lengths: np.ndarray, types: np.ndarray | None) -> Encoded:
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    # surrogatepass: a lone surrogate (valid JSON, invalid UTF-8) is one code point like any other
    ids = np.frombuffer("".join(pieces).encode("utf-32-le", "surrogatepass"), "<u4").astype(np.int32)
    return Encoded(offsets, ids, types, int(offsets[-1]))
