"""Inference-free sparse queries: a query's vector is the IDF weight of each distinct token it has.

OpenSearch's `doc-*` sparse encoders run the masked LM on documents only; a query needs no forward,
just a lookup in the model folder's `idf.json` ({token: weight}). This is sentence-transformers'
`SparseStaticEmbedding` (the query route of their published `Router`): the query is tokenized
without special tokens, truncated to the model's length, and each distinct token gets its weight.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

IDF_FILE = "idf.json"
ROUTER_FILE = "router_config.json"  # sentence-transformers' Router: separate query and document modules

SparseRow = tuple[np.ndarray, np.ndarray]  # (int32 ascending vocabulary ids, float32 weights)


@dataclass(frozen=True, slots=True)
class IdfTable:
    """One weight per vocabulary id (0 for tokens `idf.json` leaves out)."""

    weights: np.ndarray  # float32[vocabulary size, added tokens included]

    @classmethod
    def read(cls, path: Path, tokenizer: Tokenizer) -> IdfTable:
        """The table from an `idf.json`; tokens the vocabulary lacks are skipped (as SIE does)."""
        try:
            found = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(found, dict) or not found:
            raise ValueError(f"{path} holds no {{token: weight}} object")
        weights = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), np.float32)
        for token, raw in found.items():
            weight = float(raw)
            if not math.isfinite(weight):
                raise ValueError(f"{path}: weight of {token!r} is not finite")
            token_id = tokenizer.token_to_id(token)
            if token_id is not None and token_id < len(weights):
                weights[token_id] = weight
        return cls(weights)

    def lookup(self, token_ids: Sequence[Sequence[int]]) -> list[SparseRow]:
        """Each item's distinct tokens with a positive weight, ascending by id."""
        rows = []
        for ids in token_ids:
            unique = np.unique(np.asarray(ids, np.int64))
            unique = unique[unique < len(self.weights)]
            values = self.weights[unique]
            keep = values > 0  # a token whose weight is 0 (or that idf.json lacks) is no term
            rows.append((unique[keep].astype(np.int32), values[keep]))
        return rows


def read_idf_table(folder: Path, tokenizer: Tokenizer) -> IdfTable | None:
    """The folder's IDF table, or None when its queries take the forward: no `idf.json` (a plain
    SPLADE model), or a sentence-transformers recipe without a query/document Router (one module
    list for both, so queries run the masked LM as documents do)."""
    path = folder / IDF_FILE
    if not path.is_file() or ((folder / "modules.json").is_file() and not (folder / ROUTER_FILE).is_file()):
        return None
    return IdfTable.read(path, tokenizer)
