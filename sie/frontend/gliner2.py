"""GLiNER2 frontend half, going in: the row gliner2's processor builds, as ids and token roles.

gliner2 (`SchemaTransformer`) reads one row per text: each schema as
`( [P] name ( [E] field ... ) )` (entities [E], structure fields [C], class labels [L]), schemas
joined by [SEP_STRUCT], then [SEP_TEXT] and the text's words. The text gets a "." when it ends in
no sentence end; its words are matched in the text as given (a combining mark or a zero-width
joiner stays inside its word) and lowercased one by one. Every piece is tokenized on its own,
without special tokens. The aux tells the device each token's role (see
sie/gpu_proc/adapters/gliner2.py).
"""

from __future__ import annotations

import itertools
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InputTooLong, InvalidInput
from sie.frontend.tokenize import Encoded
from sie.model_location import folder_tokenizer_file, resolve_weights_dir

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

SENTENCE_END = (".", "!", "?")
SEP_STRUCT, SEP_TEXT = "[SEP_STRUCT]", "[SEP_TEXT]"
DESCRIPTION = "[DESCRIPTION]"
MARKERS = ("[P]", "[C]", "[E]", "[R]", "[L]")  # tokens whose vectors the heads read
SPECIAL_TOKENS = (SEP_STRUCT, SEP_TEXT, *MARKERS, "[EXAMPLE]", "[OUTPUT]", DESCRIPTION)
SchemaKind = Literal["entities", "classification", "structure"]
MAX_NAME_CHARS = 128  # SIE's limit on a label, task, field name or choice
DEFAULT_MAX_PROMPT_TOKENS = 2048  # SIE's default limit on the schema part of a row
DEFAULT_MAX_WORDS = 512  # SIE's word window when a model sets no max_sequence_length
DEFAULT_THRESHOLD = 0.5
_FIELD_MARKER: dict[SchemaKind, str] = {"entities": "[E]", "classification": "[L]", "structure": "[C]"}


@dataclass(frozen=True, slots=True)
class Schema:
    """One task of the row: its prompt name and its fields (entity types, labels or field names)."""

    kind: SchemaKind
    name: str
    fields: tuple[str, ...]

    def tokens(self) -> list[str]:
        marker = _FIELD_MARKER[self.kind]
        pieces = ["(", "[P]", self.name, "("]
        for field in self.fields:
            pieces += [marker, field]
        return [*pieces, ")", ")"]


@dataclass(frozen=True, slots=True)
class Words:
    """What the model reads of one text: the text with gliner2's "." (if added), and each word's
    (start, end) in it. `prefix` words (a structure's choices) come before the text's own."""

    text: str
    spans: list[tuple[int, int]]
    n_read: int  # words (prefix included) the device reads: its rows of span scores
    prefix: tuple[str, ...] = ()


def model_text(text: str) -> str:
    """The text as gliner2 reads it: a "." appended when it ends in no sentence end."""
    if not text:
        return "."
    return text if text.endswith(SENTENCE_END) else text + "."


@cache
def word_pattern() -> re.Pattern[str]:
    """gliner2's word splitter (2.x): URLs, e-mails, handles, words, any other character. Word
    characters are \\w, the combining marks (planes 0, 1 and 14 hold them all) and ZWNJ and ZWJ."""
    codes = itertools.chain(range(0x20000), range(0xE0000, 0xF0000))
    marks = [c for c in codes if unicodedata.category(chr(c)).startswith("M")]
    ranges, first = [], marks[0]
    for previous, current in itertools.pairwise([*marks, -1]):
        if current != previous + 1:
            ranges.append(f"{chr(first)}-{chr(previous)}" if previous > first else chr(first))
            first = current
    word = "[\\w" + "".join(ranges) + "\u200c\u200d]"
    return re.compile(
        rf"(?:https?://[^\s]+|www\.[^\s]+)|[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{{2,}}|@[a-z0-9_]+"
        rf"|{word}+(?:[-_]{word}+)*|\S",
        re.IGNORECASE,
    )


def split_words(text: str) -> tuple[list[str], list[tuple[int, int]]]:
    """gliner2's words, lowercased one by one, and their offsets in the text as given."""
    found = [(m.group().lower(), m.span()) for m in word_pattern().finditer(text)]
    return [w for w, _ in found], [s for _, s in found]


def check_field_names(names: Sequence[str], what: str, limit: int | None = MAX_NAME_CHARS) -> None:
    """SIE's cap on a name's length (`limit`); and a marker token inside a name would be read as a
    marker."""
    if limit is not None and any(len(name) > limit for name in names):
        raise InvalidInput(f"GLiNER2 {what} may have at most {limit} characters each")
    for name in names:
        if any(token in name for token in SPECIAL_TOKENS):
            raise InvalidInput(
                f"{what} must not contain GLiNER2's marker tokens ({', '.join(SPECIAL_TOKENS)})"
            )


def checked_threshold(value: Any) -> float:
    # Compared, not converted: NaN compares false, and a JSON integer may not fit a float.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput("GLiNER2 threshold must be a finite number between 0 and 1")
    if not 0.0 <= value <= 1.0:
        raise InvalidInput("GLiNER2 threshold must be a finite number between 0 and 1")
    return float(value)


def schema_head(name: str, prompt: str | None, described: Sequence[tuple[str, str]]) -> str:
    """A schema's prompt piece as gliner2's processor writes it: `name: prompt` (or the name alone),
    then ` [DESCRIPTION] label: description` for each (label, description), in the order given."""
    head = f"{name}: {prompt}" if prompt else name
    return head + "".join(f" {DESCRIPTION} {label}: {description}" for label, description in described)


def entity_schema(labels: Sequence[str], descriptions: dict[str, str]) -> Schema:
    """gliner2's entity schema; a label's description goes into the prompt, in label order."""
    described = [(label, descriptions[label]) for label in labels if label in descriptions]
    return Schema("entities", schema_head("entities", None, described), tuple(labels))


def checked_descriptions(value: Any, labels: Sequence[str]) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidInput("GLiNER2 entity_descriptions must be an object mapping existing labels to strings")
    if any(label not in labels for label in value):
        raise InvalidInput("GLiNER2 entity_descriptions keys must exactly match existing labels")
    if any(not isinstance(description, str) for description in value.values()):
        raise InvalidInput("GLiNER2 entity_descriptions values must be strings")
    check_field_names(list(value.values()), "entity descriptions", limit=None)
    return dict(value)


@dataclass(frozen=True, slots=True)
class Limits:
    """What one row may hold, as SIE's adapter bounds it: the words of a text (the YAML's
    max_sequence_length, also gliner2's max_len), their sub-tokens (4 a word, at most 4096 for a
    DeBERTa encoder, 8192 else), the schema's tokens, and the encoder's absolute positions if any."""

    max_words: int = DEFAULT_MAX_WORDS
    max_text_tokens: int = 4 * DEFAULT_MAX_WORDS
    max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    max_row_tokens: int | None = None

    @classmethod
    def of(cls, weights_dir: Path, max_words: int | None, max_prompt_tokens: int) -> Limits:
        encoder = _read_json(weights_dir / "encoder_config" / "config.json")
        words = max_words or DEFAULT_MAX_WORDS
        deberta = encoder.get("model_type") in ("deberta", "deberta-v2")
        cap = 4096 if deberta else 8192
        positions = encoder.get("max_position_embeddings")
        absolute = encoder.get("position_embedding_type", None if deberta else "absolute") == "absolute"
        if deberta and encoder.get("position_biased_input", True):
            absolute = True
        rows = positions if absolute and isinstance(positions, int) else None
        if rows is not None:
            cap = min(cap, rows - 4)  # SIE keeps 4 positions for the specials of such encoders
        return cls(words, min(4 * words, cap), max_prompt_tokens, rows)


def prompt_limit(config: ModelConfig) -> int:
    """The profile's bound on a row's schema tokens (loadtime max_prompt_tokens)."""
    limit = config.profile().adapter_options.loadtime.get("max_prompt_tokens", DEFAULT_MAX_PROMPT_TOKENS)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"GLiNER2 max_prompt_tokens must be a positive integer, not {limit!r}")
    return limit


class Gliner2Prompts:
    """One model's rows: pieces tokenized one at a time, as gliner2's processor does."""

    def __init__(self, tokenizer: Tokenizer, limits: Limits) -> None:
        tokenizer.no_truncation()
        tokenizer.no_padding()
        missing = [t for t in SPECIAL_TOKENS if tokenizer.token_to_id(t) is None]
        if missing:
            raise ValueError(f"tokenizer lacks GLiNER2's marker tokens {missing}")
        word_pattern()  # built here, where the prompts are built, not on a request
        self._tokenizer = tokenizer
        self._marker_ids = frozenset(int(tokenizer.token_to_id(t)) for t in MARKERS)
        self.limits = limits
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_dir(
        cls, weights_dir: Path, max_words: int | None, max_prompt_tokens: int = DEFAULT_MAX_PROMPT_TOKENS
    ) -> Gliner2Prompts:
        limits = Limits.of(weights_dir, max_words, max_prompt_tokens)
        return cls(Tokenizer.from_file(str(folder_tokenizer_file(weights_dir))), limits)

    @classmethod
    def for_model(cls, config: ModelConfig) -> Gliner2Prompts:
        """A tokenizer of the model's own, read from its folder: gliner2 neither truncates nor adds
        special tokens, as the shared text tokenizer does."""
        return cls.from_dir(resolve_weights_dir(config), config.max_sequence_length, prompt_limit(config))

    def encode(
        self, texts: Sequence[str], schemas: Sequence[Schema], prefix: Sequence[str] = ()
    ) -> tuple[Encoded, list[Words]]:
        """Each text's row under `schemas` (the same for every text), and the words it reads."""
        head = self.schema_ids(schemas)
        if len(head[0]) > self.limits.max_prompt_tokens:
            raise InvalidInput(
                f"GLiNER2's task prompt (labels or schema) takes {len(head[0])} tokens, more than "
                f"the {self.limits.max_prompt_tokens} allowed"
            )
        rows, masks, read = [], [], []
        for text in texts:
            seen = model_text(text)
            words, spans = self._window(text, seen)
            ids, aux = self._text_ids([*prefix, *words])
            row = np.concatenate([head[0], ids]).astype(np.int32)
            self._check_tokens(len(row) - len(head[0]), len(row))
            rows.append(row)
            masks.append(np.concatenate([head[1], aux]).astype(np.int32))
            n_read = int(aux.max(initial=0))  # past it only words with no sub-token, which are not read
            read.append(Words(seen, spans[: max(n_read - len(prefix), 0)], n_read, tuple(prefix)))
        return _flatten(rows, masks), read

    def _window(self, text: str, seen: str) -> tuple[list[str], list[tuple[int, int]]]:
        """The words read: every word of the text must fit (SIE fails an item it would read in part);
        gliner2's max_len then keeps the first max_words, which may drop the "." it appended."""
        words, spans = split_words(seen)
        own = len(spans) - (1 if spans and spans[-1][0] >= len(text) else 0)
        if own > self.limits.max_words:
            raise InputTooLong(
                f"GLiNER2 reads at most {self.limits.max_words} words of a text and this one has {own}; "
                "split it into smaller items"
            )
        return words[: self.limits.max_words], spans[: self.limits.max_words]

    def _check_tokens(self, text_tokens: int, row_tokens: int) -> None:
        limits = self.limits
        if text_tokens > limits.max_text_tokens:
            raise InputTooLong(
                f"a text takes {text_tokens} tokens, more than GLiNER2 reads in one window "
                f"({limits.max_text_tokens}); split it into smaller items"
            )
        if limits.max_row_tokens and row_tokens > limits.max_row_tokens:
            raise InputTooLong(
                f"a text and the task's prompt take {row_tokens} tokens ({text_tokens} of them the text), "
                f"more than GLiNER2 reads in one row ({limits.max_row_tokens}); send a shorter text, "
                "or fewer or shorter labels"
            )

    def schema_ids(self, schemas: Sequence[Schema]) -> tuple[np.ndarray, np.ndarray]:
        """Ids and roles of the schemas and [SEP_TEXT]: marker tokens get -(schema index + 1)."""
        ids: list[int] = []
        roles: list[int] = []
        for j, schema in enumerate(schemas):
            if j:
                ids += self.pieces(SEP_STRUCT)
                roles += [0] * (len(ids) - len(roles))
            for piece in schema.tokens():
                sub = self.pieces(piece)
                marks = bool(sub) and sub[0] in self._marker_ids
                roles += [-(j + 1) if marks and k == 0 else 0 for k in range(len(sub))]
                ids += sub
        sep = self.pieces(SEP_TEXT)
        return np.array(ids + sep, np.int64), np.array(roles + [0] * len(sep), np.int64)

    def _text_ids(self, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Ids of the words, and roles: a word's first sub-token gets the number of words up to and
        including it, so a word with no sub-token shares the next word's position (gliner2 2.x
        keeps such a word, where 1.x dropped it and read the words after it one place early)."""
        ids: list[int] = []
        roles: list[int] = []
        for n, word in enumerate(words, 1):
            sub = self.pieces(word)
            if sub:
                roles += [n] + [0] * (len(sub) - 1)
                ids += sub
        return np.array(ids, np.int64), np.array(roles, np.int64)

    def pieces(self, piece: str) -> list[int]:
        found = self._cache.get(piece)
        if found is None:
            found = self._tokenizer.encode(piece, add_special_tokens=False).ids
            if len(piece) <= 32 and len(self._cache) < 65536:  # short pieces repeat; long ones rarely
                self._cache[piece] = found
        return found


def _flatten(rows: list[np.ndarray], masks: list[np.ndarray]) -> Encoded:
    lengths = np.fromiter((len(r) for r in rows), np.int32, len(rows))
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    input_ids = np.concatenate(rows) if rows else np.zeros(0, np.int32)
    aux = np.concatenate(masks) if masks else np.zeros(0, np.int32)
    return Encoded(offsets, input_ids, None, int(offsets[-1]), aux)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open() as fh:
        raw = json.load(fh)
    return raw if isinstance(raw, dict) else {}
