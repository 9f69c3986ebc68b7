"""GLiREL zero-shot relation extraction, frontend half: the prompt and words going in, relations out.

GLiREL reads `[CLS] [REL] type1 [REL] type2 ... [SEP] w1 w2 ... [SEP]`, each relation type one
word of the prompt and each text word tokenized on its own; a word is its first sub-token's vector.
The caller names the entities (character spans in the item's metadata); GLiREL scores every ordered
pair of them (within `max_entity_pair_distance` words when the model sets one) against every type.

Words are read as SIE reads them for GLiREL: the splitter's words, one longer than
`MAX_WORD_CHARS` read as pieces of that many characters, the first `max_len` of them, and no more
than `SUBWORDS_PER_WORD` sub-tokens per word of `max_len` in all (the first word is always read).
Entities past the words read take no part. A word that tokenizes to nothing is dropped (GLiREL
keeps it as a zero vector), as the GLiNER frontend drops one.

The device gets the ids and an aux of `w + 1` on the first sub-token of word w (prompt words, then
the text's) and 0 elsewhere, then a side channel after the real tokens that the device strips
before the encoder: `-(number of relation types)`, then `-(first + 1), -(last + 1)` words of each
entity. It returns one row per pair it scored: head first word, head last word, tail first word,
tail last word, then one logit per relation type; `decode_relations` picks them as glirel's
`predict_relations` does (sigmoid above the threshold, best `top_k` per pair).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import AddedToken, Encoding, Tokenizer

from sie.errors import InvalidInput
from sie.frontend.model_files import read_json_object
from sie.frontend.tokenize import Encoded
from sie.glirel_config import REL_TOKEN, SEP_TOKEN, GlirelSettings, backbone_dir
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

WORD_PATTERN = re.compile(r"\w+(?:[-_]\w+)*|\S")  # glirel's (and GLiNER's) word splitter
MAX_WORD_CHARS = 256  # a longer word is read in pieces (SIE's bound on one word's sub-tokens)
SUBWORDS_PER_WORD = 4  # SIE's allowance for GLiREL, whose checkpoints read English
MAX_SUBWORDS = 8192
DEBERTA_MAX_SUBWORDS = 4096  # DeBERTa's attention holds score matrices of the square of the row
ABSOLUTE_POSITION_TYPES = frozenset(
    {"albert", "bert", "camembert", "distilbert", "electra", "mpnet", "roberta", "xlm-roberta"}
)
SPECIAL_POSITIONS = 4  # positions an encoder with a position table spends around the text
MAX_LABEL_CHARS = 128  # SIE's cap on one relation type
MAX_PROMPT_TOKENS = 1024  # SIE's cap on the relation types' tokens together
PAIR_FIELDS = 4  # head first, head last, tail first, tail last (words)
# Tokens glirel adds to its encoder's tokenizer, in its order (an existing one is kept as it is).
ADDED_SPECIAL = "[FLERT]"
ADDED = ("[REL]", "[SEP]", "[E]", "[/E]")


@dataclass(frozen=True, slots=True)
class Row:
    """One item as the device reads it, and which of its entities it carries."""

    ids: np.ndarray  # int32: the real tokens, then the side channel
    aux: np.ndarray  # int32
    n_tokens: int  # real tokens (the side channel not counted)
    entities: list[int]  # the item's entities read, in the order sent
    spans: list[tuple[int, int]]  # their first and last words


class GlirelInputs:
    """Builds one model's rows: prompt, words and entities to ids and aux."""

    def __init__(self, tokenizer: Tokenizer, settings: GlirelSettings, max_subwords: int) -> None:
        self._tokenizer = tokenizer  # glirel's: no truncation, no padding, its tokens added
        self.settings = settings
        self.max_subwords = max_subwords

    @classmethod
    def from_files(
        cls, weights_dir: Path, tokenizer_file: Path, dependencies: Mapping[str, str] | None = None
    ) -> GlirelInputs:
        settings = GlirelSettings.read(weights_dir)
        encoder = read_json_object(backbone_dir(settings, dependencies or {}) / "config.json")
        return cls(glirel_tokenizer(tokenizer_file), settings, subword_budget(settings.max_len, encoder))

    @classmethod
    def for_model(cls, config: ModelConfig) -> GlirelInputs:
        return cls.from_files(
            resolve_weights_dir(config), resolve_tokenizer_file(config), config.hf_tokenizer_dependencies
        )

    def prompt(self, labels: Sequence[str]) -> list[str]:
        """`[REL] type ... [SEP]`, checked: each type tokenizes to something, all within the cap."""
        if any(len(label) > MAX_LABEL_CHARS for label in labels):
            raise InvalidInput(f"GLiREL labels may have at most {MAX_LABEL_CHARS} characters each")
        words = [*(word for label in labels for word in (REL_TOKEN, label)), SEP_TOKEN]
        encoding = self._tokenizer.encode(words, is_pretokenized=True, add_special_tokens=False)
        counts = np.bincount([w for w in encoding.word_ids if w is not None], minlength=len(words))
        if not counts[1::2].all():
            raise InvalidInput("GLiREL labels must each hold a token (not only spaces or invisible marks)")
        if len(encoding.ids) > MAX_PROMPT_TOKENS:
            raise InvalidInput(
                f"GLiREL labels take {len(encoding.ids)} tokens; a request may use at most "
                f"{MAX_PROMPT_TOKENS} tokens for them"
            )
        return words

    def row(self, text: str, prompt: list[str], entities: Sequence[tuple[int, int]]) -> Row:
        """The item's row; `entities` are checked character spans (0 <= start < end <= len(text))."""
        words = list(read_pieces(text, self.settings.max_len + 1))
        is_whole = len(words) <= self.settings.max_len
        words = words[: self.settings.max_len]
        encoding = self._encode(prompt, text, words)
        keep = _within_budget(_word_counts(encoding, len(prompt), len(words)), self.max_subwords)
        if keep < len(words):
            words, is_whole = words[:keep], False
            encoding = self._encode(prompt, text, words)
        read_end = len(text) if is_whole or not words else words[-1][1]
        aux, kept = _first_subtokens(encoding.word_ids, len(prompt))
        kept_words = [words[w] for w in kept]
        read, spans = _entity_words(text, entities, kept_words, read_end)
        side = [-(len(prompt) // 2), *(-(w + 1) for span in spans for w in span)]
        ids = np.concatenate([np.asarray(encoding.ids, np.int32), np.zeros(len(side), np.int32)])
        return Row(ids, np.concatenate([aux, np.asarray(side, np.int32)]), len(encoding.ids), read, spans)

    def _encode(self, prompt: list[str], text: str, words: list[tuple[int, int]]) -> Encoding:
        pieces = [*prompt, *(text[start:end] for start, end in words)]
        return self._tokenizer.encode(pieces, is_pretokenized=True, add_special_tokens=True)


def glirel_tokenizer(tokenizer_file: Path) -> Tokenizer:
    """The encoder's tokenizer as glirel uses it: its added tokens ([FLERT] special, then [REL],
    [SEP], [E], [/E] where missing), each text word on its own, no truncation, no padding."""
    tokenizer = Tokenizer.from_file(str(tokenizer_file))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    if tokenizer.token_to_id(ADDED_SPECIAL) is None:
        tokenizer.add_special_tokens([AddedToken(ADDED_SPECIAL, special=True, normalized=False)])
    for token in ADDED:
        if tokenizer.token_to_id(token) is None:
            tokenizer.add_tokens([AddedToken(token, special=False, normalized=True)])
    return tokenizer


def subword_budget(max_words: int, encoder: Mapping[str, Any]) -> int:
    """Sub-tokens a text may take: SIE's bound for a model reading `max_words` words."""
    model_type = encoder.get("model_type")
    cap = DEBERTA_MAX_SUBWORDS if model_type in ("deberta", "deberta-v2") else MAX_SUBWORDS
    positions = encoder.get("max_position_embeddings")
    kind = encoder.get("position_embedding_type")
    if isinstance(positions, int) and (
        kind == "absolute" or (kind is None and model_type in ABSOLUTE_POSITION_TYPES)
    ):
        cap = min(cap, positions - SPECIAL_POSITIONS)
    return max(1, min(SUBWORDS_PER_WORD * max_words, cap))


def read_pieces(text: str, max_words: int) -> Iterator[tuple[int, int]]:
    """(start, end) of the first `max_words` words, a word over MAX_WORD_CHARS as its pieces."""
    read = 0
    for match in WORD_PATTERN.finditer(text):
        start, end = match.span()
        for piece in range(start, end, MAX_WORD_CHARS):
            if read == max_words:
                return
            yield piece, min(piece + MAX_WORD_CHARS, end)
            read += 1


def _word_counts(encoding: Encoding, n_prompt: int, n_words: int) -> np.ndarray:
    """Sub-tokens of each text word."""
    ids = [w - n_prompt for w in encoding.word_ids if w is not None and w >= n_prompt]
    return np.bincount(np.asarray(ids, np.int64), minlength=n_words)


def _within_budget(counts: np.ndarray, budget: int) -> int:
    """How many leading words stay within `budget` sub-tokens (at least one)."""
    fits = int(np.count_nonzero(np.cumsum(counts) <= budget))
    return max(1, fits) if len(counts) else 0


def _first_subtokens(word_ids: list[int | None], n_prompt: int) -> tuple[np.ndarray, list[int]]:
    """aux: `w + 1` on each word's first sub-token (words without tokens skipped in the numbering),
    and the text words kept (0-based among the text's)."""
    wid = np.fromiter((-1 if w is None else w for w in word_ids), np.int64, len(word_ids))
    previous = np.concatenate(([-1], wid[:-1]))
    first = (wid >= 0) & (wid != previous)
    aux = np.where(first, np.cumsum(first), 0).astype(np.int32)
    kept = (wid[first & (wid >= n_prompt)] - n_prompt).tolist()
    return aux, kept


def _entity_words(
    text: str, entities: Sequence[tuple[int, int]], words: Sequence[tuple[int, int]], read_end: int
) -> tuple[list[int], list[tuple[int, int]]]:
    """The entities read (as SIE decides: ending within the words read, spaces aside) and the first
    and last word each covers; one covering no word read is a 400."""
    read, spans = [], []
    for index, (start, end) in enumerate(entities):
        if end > read_end and (start >= read_end or text[read_end:end].strip()):
            continue
        covered = [w for w, (s, e) in enumerate(words) if e > start and s < end]
        if not covered:
            raise InvalidInput(f"GLiREL entity span [{start}, {end}) does not cover any text token")
        read.append(index)
        spans.append((covered[0], covered[-1]))
    return read, spans


def flatten(rows: Sequence[Row]) -> Encoded:
    lengths = np.fromiter((len(row.ids) for row in rows), np.int32, len(rows))
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    ids = np.concatenate([row.ids for row in rows]) if rows else np.zeros(0, np.int32)
    aux = np.concatenate([row.aux for row in rows]) if rows else np.zeros(0, np.int32)
    return Encoded(offsets, ids, None, sum(row.n_tokens for row in rows), aux)


def decode_relations(
    values: np.ndarray,
    labels: Sequence[str],
    spans: Sequence[tuple[int, int]],
    names: Sequence[str],
    threshold: float,
    top_k: int,
) -> list[dict[str, Any]]:
    """One item's relations from its device rows, in glirel's order: pair by pair and type by type,
    or with `top_k` > 0 best first, at most `top_k` per (head, tail).

    `spans[k]` is entity k's first and last word and `names[k]` its text; a pair's head (tail) is
    the first entity with its words, as SIE maps glirel's positions back to the caller's entities.
    """
    table = np.asarray(values, np.float32).reshape(-1, PAIR_FIELDS + len(labels))
    with np.errstate(over="ignore"):  # exp overflow gives the right 0
        probs = 1.0 / (1.0 + np.exp(-table[:, PAIR_FIELDS:]))
    pairs, classes = np.nonzero(probs > np.float32(threshold))
    found = [
        (tuple(table[p, :PAIR_FIELDS].astype(np.int64).tolist()), int(c), float(probs[p, c]))
        for p, c in zip(pairs.tolist(), classes.tolist(), strict=True)
    ]
    if top_k > 0:
        found = _top_per_pair(found, top_k)
    first_entity: dict[tuple[int, int], int] = {}
    for index, span in enumerate(spans):
        first_entity.setdefault(tuple(span), index)
    return [
        {
            "head": names[first_entity[(pair[0], pair[1])]].strip(),
            "tail": names[first_entity[(pair[2], pair[3])]].strip(),
            "relation": labels[c],
            "score": score,
        }
        for pair, c, score in found
    ]


def _top_per_pair(
    found: list[tuple[tuple[int, ...], int, float]], top_k: int
) -> list[tuple[tuple[int, ...], int, float]]:
    """glirel's top_k: best first (ties in their order), at most `top_k` per (head, tail) words."""
    taken: dict[tuple[int, ...], int] = {}
    kept = []
    for relation in sorted(found, key=lambda r: -r[2]):
        count = taken.get(relation[0], 0)
        if count < top_k:
            kept.append(relation)
            taken[relation[0]] = count + 1
    return kept
