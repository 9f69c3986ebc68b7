"""ColBERT (late interaction) on the frontend side: PyLate's tokenization, and MaxSim scoring.

The device only runs encoder + projection; everything about tokens is decided here, as PyLate
decides it (`pylate/models/colbert.py`, `tokenize` and `encode`):

- a marker token (`query_prefix` / `document_prefix`) goes right after the first token ([CLS]),
  and the text is cut so the total, marker included, fits `query_length` / `document_length`;
- queries are padded with the mask token up to `query_length` ("query expansion"); the encoder
  attends to those only when `attend_to_expansion_tokens`, but their vectors are always kept;
- document vectors of skiplist tokens (punctuation by default) are dropped.

What the device must do per token travels in `Encoded.aux`: bit 0 = keep the token's vector in
the output, bit 1 = attend to the token. Padding added by the runner is 0 in both bits.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sie.frontend.model_files import read_json_object, tokenizer_settings
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.model_config import ModelConfig, ModelConfigError, RuntimeOptions
from sie.model_location import resolve_weights_dir

KEEP = 1  # aux bit 0: the token's vector is part of the output
ATTEND = 2  # aux bit 1: the encoder attends to the token

# PyLate's defaults when neither the YAML nor the model folder says otherwise.
DEFAULT_QUERY_PREFIX, DEFAULT_DOCUMENT_PREFIX = "[Q] ", "[D] "
# Stanford-NLP ColBERT checkpoints (config.json architectures == ["HF_ColBERT"]) mark with unused tokens.
STANFORD_QUERY_PREFIX, STANFORD_DOCUMENT_PREFIX = "[unused0]", "[unused1]"
DEFAULT_QUERY_LENGTH = 32
DEFAULT_DOCUMENT_LENGTH = 180
EXPANSION_TOKEN_CANDIDATES = ("[MASK]", "<mask>")


@dataclass(frozen=True, slots=True)
class ColbertSettings:
    """A model's resolved ColBERT tokenization settings (YAML, then the model folder, then PyLate)."""

    query_prefix: str = DEFAULT_QUERY_PREFIX  # "" = no marker
    document_prefix: str = DEFAULT_DOCUMENT_PREFIX
    query_length: int = DEFAULT_QUERY_LENGTH  # total tokens of a query, marker and expansion included
    document_length: int = DEFAULT_DOCUMENT_LENGTH  # most tokens of a document, marker included
    do_query_expansion: bool = True
    attend_to_expansion_tokens: bool = False
    skiplist_words: tuple[str, ...] = tuple(string.punctuation)
    expansion_token: str | None = "[MASK]"  # what queries are padded with (PyLate: mask, else eos, else pad)
    do_lower_case: bool = False  # sentence-transformers lowercases texts before tokenizing when set


def colbert_settings(
    runtime: RuntimeOptions, weights_dir: Path | None, max_sequence_length: int | None = None
) -> ColbertSettings:
    """Settings from the YAML's runtime options, falling back to what the weights folder holds.

    The folder is read the way PyLate reads it: `config_sentence_transformers.json` (PyLate saves),
    or `artifact.metadata` for Stanford-NLP checkpoints; `sentence_bert_config.json` for lowercasing
    and `tokenizer_config.json` for the mask token. The YAML's `max_sequence_length` is the document
    length when given.
    """
    folder = _folder_settings(weights_dir) if weights_dir is not None else {}
    is_stanford = bool(folder.pop("is_stanford", False))
    default_q, default_d = (
        (STANFORD_QUERY_PREFIX, STANFORD_DOCUMENT_PREFIX)
        if is_stanford
        else (DEFAULT_QUERY_PREFIX, DEFAULT_DOCUMENT_PREFIX)
    )
    skiplist = runtime.skiplist_words if runtime.skiplist_words is not None else folder.get("skiplist_words")
    return ColbertSettings(
        query_prefix=_first(runtime.query_prefix, folder.get("query_prefix"), default_q),
        document_prefix=_first(runtime.document_prefix, folder.get("document_prefix"), default_d),
        query_length=_first(runtime.query_length, folder.get("query_length"), DEFAULT_QUERY_LENGTH),
        document_length=_first(
            runtime.document_length,
            max_sequence_length,
            folder.get("document_length"),
            DEFAULT_DOCUMENT_LENGTH,
        ),
        do_query_expansion=bool(_first(runtime.do_query_expansion, folder.get("do_query_expansion"), True)),
        # RuntimeOptions defaults this flag to False, so only a True there can override the folder.
        attend_to_expansion_tokens=bool(
            runtime.attend_to_expansion_tokens or folder.get("attend_to_expansion_tokens")
        ),
        skiplist_words=tuple(skiplist) if skiplist is not None else tuple(string.punctuation),
        expansion_token=folder.get("expansion_token", EXPANSION_TOKEN_CANDIDATES[0]),
        do_lower_case=bool(folder.get("do_lower_case", False)),
    )


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _folder_settings(folder: Path) -> dict[str, Any]:
    found: dict[str, Any] = {}
    config = read_json_object(folder / "config.json")
    if (config.get("architectures") or [None])[0] == "HF_ColBERT":
        meta = read_json_object(folder / "artifact.metadata")
        found["is_stanford"] = True
        stanford_keys = {
            "query_token_id": "query_prefix",
            "doc_token_id": "document_prefix",
            "query_maxlen": "query_length",
            "doc_maxlen": "document_length",
            "attend_to_mask_tokens": "attend_to_expansion_tokens",
        }
        found.update({ours: meta[theirs] for theirs, ours in stanford_keys.items() if theirs in meta})
    pylate = read_json_object(folder / "config_sentence_transformers.json")
    pylate_keys = (
        "query_prefix",
        "document_prefix",
        "query_length",
        "document_length",
        "attend_to_expansion_tokens",
        "skiplist_words",
        "do_query_expansion",
    )
    found.update({key: pylate[key] for key in pylate_keys if pylate.get(key) is not None})
    found["do_lower_case"] = read_json_object(folder / "sentence_bert_config.json").get(
        "do_lower_case", False
    )
    expansion = _expansion_token(folder)
    if expansion is not None:
        found["expansion_token"] = expansion
    return found


def _expansion_token(folder: Path) -> str | None:
    """The tokenizer's mask token, else its eos, else its pad token (PyLate's order)."""
    tokens = tokenizer_settings(folder)
    for key in ("mask_token", "eos_token", "pad_token"):
        value = tokens.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value:
            return value
    return None


@dataclass(frozen=True, slots=True)
class _Side:
    """How one side (queries or documents) is tokenized, in token ids."""

    prefix_id: int | None
    max_length: int  # tokens the tokenizer may produce, before the marker is inserted
    pad_to: int | None  # queries with expansion: total length after padding


class ColbertTokenization:
    """Tokenizes texts into exactly PyLate's input ids, with the keep/attend bits in `aux`."""

    def __init__(self, tokenizer: TextTokenizer, settings: ColbertSettings) -> None:
        self.settings = settings
        self._tokenizer = tokenizer
        raw = tokenizer.raw
        self._n_tail = _closing_special_tokens(raw.encode("a").special_tokens_mask)  # [SEP]
        n_special = raw.num_special_tokens_to_add(False)
        self._query = self._side(settings.query_prefix, settings.query_length, n_special, is_query=True)
        self._document = self._side(
            settings.document_prefix, settings.document_length, n_special, is_query=False
        )
        self._expansion_id = self._expansion_id_of(settings) if self._query.pad_to is not None else 0
        self._attend_expansion = settings.attend_to_expansion_tokens
        # Words that are not one token of the vocabulary are dropped from the skiplist, as
        # sentence-transformers does: PyLate maps them to [UNK] and so would drop every [UNK].
        ids = [raw.token_to_id(word) for word in settings.skiplist_words]
        self._skiplist = np.unique(np.asarray([i for i in ids if i is not None], dtype=np.int32))

    @classmethod
    def for_model(
        cls, tokenizer: TextTokenizer, config: ModelConfig, profile: str | None = None
    ) -> ColbertTokenization:
        runtime = config.profile(profile).adapter_options.runtime
        settings = colbert_settings(runtime, resolve_weights_dir(config), config.max_sequence_length)
        return cls(tokenizer, settings)

    def _side(self, prefix: str, length: int, n_special: int, *, is_query: bool) -> _Side:
        prefix_id = self._prefix_id(prefix) if prefix else None
        max_length = min(length - (prefix_id is not None), self._tokenizer.max_length)
        if max_length < n_special + 1:
            raise ModelConfigError(
                f"ColBERT {'query' if is_query else 'document'} length {length} is too short"
            )
        pad_to = length if is_query and self.settings.do_query_expansion else None
        return _Side(prefix_id, max_length, pad_to)

    def _prefix_id(self, prefix: str) -> int:
        raw = self._tokenizer.raw
        token_id = raw.token_to_id(prefix)
        if token_id is None:  # configs may write "[unused0] " for the vocabulary's "[unused0]"
            token_id = raw.token_to_id(prefix.strip())
        if token_id is None:
            raise ModelConfigError(f"ColBERT marker {prefix!r} is not a token of the model's tokenizer")
        return token_id

    def _expansion_id_of(self, settings: ColbertSettings) -> int:
        raw = self._tokenizer.raw
        names = (settings.expansion_token, *EXPANSION_TOKEN_CANDIDATES)
        ids = [raw.token_to_id(name) for name in names if name]
        found = next((i for i in ids if i is not None), None)
        if found is None:
            raise ModelConfigError("ColBERT query expansion needs a mask token; the tokenizer has none")
        return found

    def encode(self, texts: Sequence[str], is_query: bool) -> Encoded:
        """Token ids of queries or documents, flat, with `aux` = KEEP | ATTEND bits per token."""
        side = self._query if is_query else self._document
        # sentence-transformers (which PyLate tokenizes through) strips texts and may lowercase them.
        cleaned = [t.strip().lower() if self.settings.do_lower_case else t.strip() for t in texts]
        base = self._tokenizer.encode(cleaned)
        lengths = np.diff(base.offsets).astype(np.int64)
        kept = np.minimum(lengths, side.max_length)
        has_prefix = int(side.prefix_id is not None)
        final = kept + has_prefix if side.pad_to is None else np.full_like(kept, side.pad_to)
        offsets = np.zeros(len(final) + 1, np.int64)
        np.cumsum(final, out=offsets[1:])
        total = int(offsets[-1])

        source, target = self._placement(lengths, kept, offsets[:-1], has_prefix)
        input_ids = np.full(total, self._expansion_id, np.int32)
        input_ids[target] = base.input_ids[source]
        aux = np.zeros(total, np.int32)
        aux[target] = ATTEND
        if side.prefix_id is not None:
            marker_at = offsets[:-1] + np.minimum(kept, 1)
            input_ids[marker_at] = side.prefix_id
            aux[marker_at] = ATTEND
        token_type_ids = None
        if base.token_type_ids is not None:
            token_type_ids = np.zeros(total, np.int8)
            token_type_ids[target] = base.token_type_ids[source]
        return Encoded(
            offsets.astype(np.int32), input_ids, token_type_ids, total, self._bits(aux, input_ids, is_query)
        )

    def _placement(
        self, lengths: np.ndarray, kept: np.ndarray, starts: np.ndarray, has_prefix: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flat source positions of the tokens that survive truncation, and where each one goes.

        Truncation keeps the head of the text and the template's closing tokens ([SEP]), as the
        tokenizer's own truncation does; the marker then takes position 1, shifting the rest.
        """
        n_tokens = int(lengths.sum())
        item = np.repeat(np.arange(len(lengths)), lengths)
        position = np.arange(n_tokens) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        length, keep = lengths[item], kept[item]
        tail = self._n_tail
        is_kept = (position < keep - tail) | (position >= length - tail)
        new_position = np.where(position < keep - tail, position, position - (length - keep))
        new_position = new_position + has_prefix * (new_position >= 1)
        source = np.flatnonzero(is_kept)
        return source, (starts[item] + new_position)[source]

    def _bits(self, aux: np.ndarray, input_ids: np.ndarray, is_query: bool) -> np.ndarray:
        is_real = aux == ATTEND  # expansion tokens are still 0 here
        if is_query:
            keep = np.ones_like(is_real) if self._query.pad_to is not None else is_real
            attend = is_real | self._attend_expansion
        else:
            keep = is_real & ~np.isin(input_ids, self._skiplist)
            attend = is_real
        bits: np.ndarray = (keep * KEEP + attend * ATTEND).astype(np.int32)
        return bits


def _closing_special_tokens(special_tokens_mask: list[int]) -> int:
    """How many special tokens the template puts after the text (1 for BERT's [SEP])."""
    count = 0
    while count < len(special_tokens_mask) and special_tokens_mask[-1 - count]:
        count += 1
    return count


def maxsim(query: np.ndarray, docs: list[np.ndarray]) -> np.ndarray:
    """Late-interaction scores: per document, the sum over query vectors of their best dot product.

    Vectors are expected L2-normalized (so dot = cosine). A document with no vectors scores 0.
    Returns float32 [len(docs)].
    """
    scores = np.zeros(len(docs), np.float32)
    filled = [i for i, doc in enumerate(docs) if len(doc)]
    if not filled or not len(query):
        return scores
    tokens = np.concatenate([docs[i] for i in filled]).astype(np.float32, copy=False)
    starts = np.cumsum([0] + [len(docs[i]) for i in filled[:-1]])
    sims = query.astype(np.float32, copy=False) @ tokens.T  # [n_query, n_doc_tokens]
    scores[filled] = np.maximum.reduceat(sims, starts, axis=1).sum(axis=0)
    return scores
