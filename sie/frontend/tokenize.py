"""Text formatting and tokenization into the flat layout the rings carry (offsets + int32 ids).

Tokenizing happens in the frontend so the device process only runs forward passes. The Rust
tokenizer releases the GIL inside `encode_batch`, so callers may run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from tokenizers import Encoding, Tokenizer

from sie.errors import InvalidInput, ModelLoadFailed
from sie.families import FAMILIES
from sie.frontend.model_files import read_json_object
from sie.model_config import ModelConfig, ModelConfigError, RuntimeOptions
from sie.model_location import resolve_tokenizer_file

T = TypeVar("T")

DEFAULT_MAX_LENGTH = 512
# First guess at how many characters the kept tokens can span, per token of max_length. English
# WordPiece/BPE averages 4-5 characters a token and code about 3, so this cut leaves a 3x margin;
# texts where it is not enough are detected and re-cut larger (see `TextTokenizer._cap`).
CHARS_PER_TOKEN_GUESS = 16
BUDGET_GROWTH = 16


def format_text(text: str, *, is_query: bool, instruction: str | None, runtime: RuntimeOptions) -> str:
    """Apply the profile's query or document template with the instruction that applies (the
    request's, else the profile's; see `RuntimeOptions.instruction_for`); with no template, prefix
    the instruction if any."""
    template = runtime.query_template if is_query else runtime.doc_template
    instruction = runtime.instruction_for(instruction, is_query=is_query)
    if template:
        try:
            # Extra keyword arguments are ignored by str.format, so a template without
            # {instruction} is fine when an instruction is given.
            return template.format(text=text, instruction=instruction or "")
        except (KeyError, IndexError) as exc:
            raise InvalidInput(f"Unsupported template placeholder: {exc}") from None
    if instruction:
        return f"{instruction} {text}"
    return text


@dataclass(frozen=True, slots=True)
class Encoded:
    """A tokenized batch, flat: item i is `input_ids[offsets[i]:offsets[i + 1]]`."""

    offsets: np.ndarray  # int32[n + 1], prefix sums of per-item lengths
    input_ids: np.ndarray  # int32[n_tokens]
    token_type_ids: np.ndarray | None  # int8[n_tokens]; None when every type id is 0
    n_tokens: int
    aux: np.ndarray | None = None  # int32[n_tokens] per-token extra input (see sie.shm.layout)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int] | np.ndarray]) -> Encoded:
        """Rows of token ids in the flat layout, with no token types."""
        offsets = np.zeros(len(rows) + 1, np.int32)
        np.cumsum([len(row) for row in rows], out=offsets[1:])
        pieces = [np.asarray(row, np.int32) for row in rows]
        input_ids = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        return cls(offsets, input_ids, None, int(offsets[-1]))


class TextTokenizer:
    """One model's tokenizer: truncation to `max_length` tokens (special tokens included), no padding."""

    def __init__(self, tokenizer_json: Path, max_length: int, *, append_id: int | None = None) -> None:
        # `append_id` (a decoder embedder's EOS) is added after truncation, so it is never cut off
        # and always the last token, where last-token pooling reads.
        self._append_id = append_id
        max_length = max_length - 1 if append_id is not None else max_length
        self.max_length = max_length
        # tokenizer.json often carries its own truncation and fixed padding (MiniLM's pads to 128):
        # both are replaced, since the device packs sequences flat and the model config sets length.
        self._tokenizer = Tokenizer.from_file(str(tokenizer_json))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length)
        # A second copy with no truncation, to check character cuts of very long texts and to read
        # prompt pieces: made on first use, since for a large vocabulary it is tens of MB in every
        # frontend and an embedder of short texts never needs it. It is made from the loaded copy,
        # not the file, which a disk cache may have evicted since.
        self._untruncated: Tokenizer | None = None
        self._untruncated_lock = threading.Lock()
        self._char_budget = max_length * CHARS_PER_TOKEN_GUESS
        self._single_has_types = any(self._tokenizer.encode("a").type_ids)

    @property
    def _probe(self) -> Tokenizer:
        if self._untruncated is None:
            with self._untruncated_lock:
                if self._untruncated is None:
                    probe = Tokenizer.from_str(self._tokenizer.to_str())
                    probe.no_padding()
                    probe.no_truncation()
                    self._untruncated = probe
        return self._untruncated

    @property
    def raw(self) -> Tokenizer:
        """The underlying `tokenizers.Tokenizer` (truncating at max_length, no padding)."""
        return self._tokenizer

    def encode(self, texts: Sequence[str]) -> Encoded:
        """Tokenize single texts (embedding inputs)."""
        keep = self.max_length - self._tokenizer.num_special_tokens_to_add(False)
        limit = self._char_budget
        capped = [text if len(text) <= limit else self._cut(text, keep)[0] for text in texts]
        encodings = self._tokenizer.encode_batch_fast(capped)
        encoded = _flatten(encodings, keep_types=self._single_has_types)
        return encoded if self._append_id is None else _append_token(encoded, self._append_id)

    def encode_pairs(self, queries: Sequence[str], docs: Sequence[str]) -> Encoded:
        """Tokenize (query, doc) pairs for cross-encoders; token types mark the two segments."""
        return _flatten(self._pair_encodings(queries, docs, with_offsets=False), keep_types=True)

    def encode_pairs_with_spans(
        self, queries: Sequence[str], docs: Sequence[str]
    ) -> tuple[Encoded, list[np.ndarray]]:
        """`encode_pairs`, plus each item's character span in its doc per token: int32 [len_i, 2],
        (0, 0) on the query's tokens and the special tokens the pair layout adds."""
        encodings = self._pair_encodings(queries, docs, with_offsets=True)
        return _flatten(encodings, keep_types=True), [_char_spans(e, sequence=1) for e in encodings]

    def _pair_encodings(
        self, queries: Sequence[str], docs: Sequence[str], *, with_offsets: bool
    ) -> list[Encoding]:
        if len(queries) != len(docs):
            raise ValueError("queries and docs must have the same length")
        limit = self._char_budget
        is_short = [len(q) <= limit and len(d) <= limit for q, d in zip(queries, docs, strict=True)]
        short = [(q, d) for q, d, ok in zip(queries, docs, is_short, strict=True) if ok]
        # `encode_batch_fast` skips offset tracking; only callers that read offsets pay for it.
        encode_batch = self._tokenizer.encode_batch if with_offsets else self._tokenizer.encode_batch_fast
        encoded_short = iter(encode_batch(short))
        return [
            next(encoded_short) if ok else self._encode_long_pair(q, d)
            for q, d, ok in zip(queries, docs, is_short, strict=True)
        ]

    def head_ids(self, texts: Sequence[str], keep: int) -> list[list[int]]:
        """Each text's first `keep` token ids, without special tokens and whatever `max_length` is:
        pieces of a prompt the caller joins. A long text is tokenized only as far as it needs."""
        limit = self._char_budget
        short = [text for text in texts if len(text) <= limit]
        encoded = iter(self._probe.encode_batch_fast(short, add_special_tokens=False))
        return [
            next(encoded).ids[:keep] if len(text) <= limit else self._head(text, keep).encoding.ids[:keep]
            for text in texts
        ]

    def _cut(self, text: str, keep: int) -> tuple[str, Encoding | None, int]:
        """The shortest character cut of `text` whose complete words give at least `keep` tokens.

        Cutting by characters first matters: tokenizing 1 MB to keep 256 tokens wastes seconds.
        But no fixed character budget is safe on its own, since one token can span any number of
        characters (a run of whitespace, an over-long word that becomes [UNK]). So a cut is
        checked: it is kept only if the tokens of its complete words (all but the last, which the
        cut may have split) already fill `keep`. Tokenizers normalize and pre-tokenize locally, so
        those words tokenize the same in the full text, and right truncation keeps only them either
        way. A failed check retries with a budget `BUDGET_GROWTH` times larger, ending at the text.

        Returns the cut, its tokens without special tokens, and how many of those belong to
        complete words; or the whole text, None and 0 when no cut passes.
        """
        budget = self._char_budget
        while len(text) > budget:
            head = text[:budget]
            probe = self._probe.encode(head, add_special_tokens=False)
            n_complete = _tokens_before_last_word(probe.word_ids)
            if n_complete >= keep:
                return head, probe, n_complete
            budget *= BUDGET_GROWTH
        return text, None, 0

    def _head(self, text: str, keep: int) -> _Head:
        head, encoding, n_complete = self._cut(text, keep)
        if encoding is not None:
            return _Head(head, encoding, n_complete, is_exact=False)
        encoding = self._probe.encode(text, add_special_tokens=False)
        return _Head(text, encoding, len(encoding), is_exact=True)

    def _encode_long_pair(self, query: str, doc: str) -> Encoding:
        """A pair with a long side: each side cut on its own, then truncated as the pair would be.

        The tokenizer's own pair truncation builds every combination of the two sides' overflow
        windows, which is quadratic in the length; truncating each side here first avoids it.
        """
        budget = self.max_length - self._tokenizer.num_special_tokens_to_add(True)
        first, second = self._head(query, budget), self._head(doc, budget)
        if _is_split_ambiguous(first, second, budget):
            first, second = _counted(first, query, self._probe), _counted(second, doc, self._probe)
        keep_first, keep_second = _longest_first(first.n_tokens, second.n_tokens, budget)
        first.encoding.truncate(keep_first)
        second.encoding.truncate(keep_second)
        return self._tokenizer.post_process(first.encoding, second.encoding, add_special_tokens=True)

    def encode_with_offsets(self, texts: Sequence[str]) -> tuple[Encoded, list[np.ndarray]]:
        """`encode`, plus each item's character span per token: int32 [len_i, 2], (0, 0) on special
        tokens. Spans index the original text (the character cut is a prefix of it)."""
        keep = self.max_length - self._tokenizer.num_special_tokens_to_add(False)
        limit = self._char_budget
        capped = [text if len(text) <= limit else self._cut(text, keep)[0] for text in texts]
        # `encode_batch_fast` skips offset tracking, so this path pays for the full `encode_batch`.
        encodings = self._tokenizer.encode_batch(capped)
        return _flatten(encodings, keep_types=self._single_has_types), [_char_spans(e) for e in encodings]


@dataclass(frozen=True, slots=True)
class _Head:
    """A text's leading part and its tokens (no special tokens)."""

    text: str
    encoding: Encoding
    n_tokens: int  # the whole text's count when is_exact; else the head's complete words' (a lower bound)
    is_exact: bool


def _tokens_before_last_word(word_ids: list[int | None]) -> int:
    i = len(word_ids) - 1
    last = word_ids[i] if i >= 0 else None
    while i >= 0 and word_ids[i] == last:
        i -= 1
    return i + 1


def _longest_first(n_first: int, n_second: int, budget: int) -> tuple[int, int]:
    """How many tokens of each side the tokenizers library's longest-first truncation keeps.

    Each side's count matters only up to the budget, except when both exceed half of it: then each
    keeps half and, with an odd budget, the strictly longer side (else the second) gets one more.
    """
    if n_first + n_second <= budget:
        return n_first, n_second
    is_swapped = n_first > n_second
    short, long = (n_second, n_first) if is_swapped else (n_first, n_second)
    long = short if short > budget else max(short, budget - short)
    if short + long > budget:
        short = budget // 2
        long = short + budget % 2
    return (long, short) if is_swapped else (short, long)


def _is_split_ambiguous(first: _Head, second: _Head, budget: int) -> bool:
    """Whether the cuts may hide which side is longer, the one thing `_longest_first` still needs."""
    if budget % 2 == 0 or min(first.n_tokens, second.n_tokens) <= budget // 2:
        return False
    if first.is_exact and second.is_exact:
        return False
    if first.is_exact or second.is_exact:
        cut, exact = (second, first) if first.is_exact else (first, second)
        return cut.n_tokens <= exact.n_tokens  # else the cut side is longer, cut or not
    return True


def _counted(head: _Head, text: str, probe: Tokenizer) -> _Head:
    """The head, with the exact token count of its whole text (linear work; ambiguous pairs only)."""
    if head.is_exact:
        return head
    return _Head(head.text, head.encoding, len(probe.encode(text, add_special_tokens=False)), is_exact=True)


def _char_spans(encoding: Encoding, *, sequence: int | None = None) -> np.ndarray:
    """int32 [len, 2] character spans per token; (0, 0) on special tokens and, when `sequence` is
    given, on the tokens of the pair's other sequence."""
    span = np.array(encoding.offsets, dtype=np.int32).reshape(-1, 2)
    dropped = np.array(encoding.special_tokens_mask, dtype=bool)
    if sequence is not None:
        dropped |= np.fromiter((s != sequence for s in encoding.sequence_ids), dtype=bool, count=len(span))
    span[dropped] = 0
    return span


def _flatten(encodings: list[Encoding], *, keep_types: bool) -> Encoded:
    """Concatenate a batch's ids into flat arrays; the per-token work happens inside numpy."""
    n = len(encodings)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, encodings), dtype=np.int32, count=n), out=offsets[1:])
    n_tokens = int(offsets[-1])
    ids = itertools.chain.from_iterable(e.ids for e in encodings)
    input_ids = np.fromiter(ids, dtype=np.int32, count=n_tokens)
    token_type_ids = None
    if keep_types:
        types = itertools.chain.from_iterable(e.type_ids for e in encodings)
        token_type_ids = np.fromiter(types, dtype=np.int8, count=n_tokens)
        if not token_type_ids.any():
            token_type_ids = None
    return Encoded(offsets, input_ids, token_type_ids, n_tokens)


def _append_token(encoded: Encoded, token_id: int) -> Encoded:
    """The same batch with `token_id` added at the end of every item (token type 0)."""
    n = len(encoded.offsets) - 1
    offsets = encoded.offsets + np.arange(n + 1, dtype=np.int32)
    ends = offsets[1:] - 1
    original = np.ones(int(offsets[-1]), dtype=bool)
    original[ends] = False
    input_ids = np.empty(int(offsets[-1]), dtype=np.int32)
    input_ids[original] = encoded.input_ids
    input_ids[ends] = token_id
    types = None
    if encoded.token_type_ids is not None:
        types = np.zeros(int(offsets[-1]), dtype=np.int8)
        types[original] = encoded.token_type_ids
    return Encoded(offsets, input_ids, types, int(offsets[-1]))


def eos_token_id(folder: Path, tokenizer: Tokenizer) -> int:
    """The EOS token named by the model's tokenizer_config.json (else config.json's eos_token_id)."""
    named = read_json_object(folder / "tokenizer_config.json").get("eos_token")
    if isinstance(named, dict):
        named = named.get("content")
    if isinstance(named, str) and tokenizer.token_to_id(named) is not None:
        return int(tokenizer.token_to_id(named))
    eos = read_json_object(folder / "config.json").get("eos_token_id")
    if isinstance(eos, list) and eos:
        eos = eos[0]
    if not isinstance(eos, int):
        raise ValueError(f"append_eos: no EOS token in {folder}'s tokenizer_config.json or config.json")
    return eos


class TokenizerCache:
    """Loads each model's tokenizer once and shares it between requests (and threads), together
    with what families build on top of it (ColBERT markers, GLiNER prompts, label tables)."""

    def __init__(self) -> None:
        self._by_model: dict[str, TextTokenizer] = {}
        self._derived: dict[tuple[str, str], object] = {}
        self._last_used: dict[str, float] = {}  # monotonic time of each model's last use here
        self._warming: set[str] = set()
        self._lock = threading.Lock()

    def is_loaded(self, config: ModelConfig) -> bool:
        return config.sie_id in self._by_model

    def warm(self, config: ModelConfig) -> None:
        """Load the model's tokenizer on a thread of its own unless it is loaded or loading: while
        the device loads the weights, so the first request after the load waits for neither in
        turn. Best effort: a failure is left for the request that needs the tokenizer to report."""
        name = config.sie_id
        if not reads_text_tokenizer(config):
            return
        with self._lock:
            if name in self._by_model or name in self._warming:
                return
            self._warming.add(name)

        def load() -> None:
            try:
                self.get(config)
            except Exception:  # reported by the request that needs the tokenizer
                pass
            finally:
                with self._lock:
                    self._warming.discard(name)

        threading.Thread(target=load, name="sie-tokenizer-warm", daemon=True).start()

    def derived(self, config: ModelConfig, name: str, build: Callable[[TextTokenizer], T]) -> T:
        """`build(tokenizer)` for this model, made once and cached under `name`."""
        self._last_used[config.sie_id] = time.monotonic()
        found = self._derived.get((config.sie_id, name))
        if found is None:
            tokenizer = self.get(config)
            found = self.built(config, name, lambda: build(tokenizer))
        return found  # type: ignore[return-value]  # stored by this same `name`, so of type T

    def built(self, config: ModelConfig, name: str, build: Callable[[], T]) -> T:
        """`build()` for this model, made once and cached under `name`: what a family reads from the
        model's folder itself (a page recipe, its own tokenizer), without loading the model's
        TextTokenizer. `build` must not call back into this cache (it runs under its lock)."""
        self._last_used[config.sie_id] = time.monotonic()
        key = (config.sie_id, name)
        found = self._derived.get(key)
        if found is None:
            with self._lock:
                found = self._derived.get(key)
                if found is None:
                    with _as_load_failure(config):
                        found = self._derived[key] = build()
        return found  # type: ignore[return-value]  # stored by this same `name`, so of type T

    def idle_models(self, idle_s: float) -> list[str]:
        """Models whose text state is held here and has not been used for `idle_s` seconds."""
        cutoff = time.monotonic() - idle_s
        return [name for name, used in list(self._last_used.items()) if used < cutoff]

    def forget(self, name: str) -> None:
        """Drop a model's tokenizer and everything built on it (its files changed or it is gone, or
        it is idle); requests holding them finish with them."""
        with self._lock:
            self._last_used.pop(name, None)
            self._by_model.pop(name, None)
            for key in [key for key in self._derived if key[0] == name]:
                del self._derived[key]

    def get(self, config: ModelConfig) -> TextTokenizer:
        self._last_used[config.sie_id] = time.monotonic()
        tokenizer = self._by_model.get(config.sie_id)
        if tokenizer is None:
            with self._lock:  # two threads missing at once load it once
                tokenizer = self._by_model.get(config.sie_id)
                if tokenizer is None:
                    with _as_load_failure(config):
                        tokenizer = _load(config)
                    self._by_model[config.sie_id] = tokenizer
        return tokenizer

    def for_profile(self, config: ModelConfig, profile: str | None) -> TextTokenizer:
        """`get`, cut shorter where the profile says `runtime.max_seq_length` (a SPLADE recipe may
        truncate below what the checkpoint supports)."""
        tokenizer = self.get(config)
        limit = config.profile(profile).adapter_options.runtime.max_seq_length
        if limit is None or limit >= tokenizer.max_length or config.is_weightless:
            return tokenizer
        return self.built(config, f"max_length:{limit}", lambda: _load(config, limit))


def reads_text_tokenizer(config: ModelConfig) -> bool:
    """Whether requests of the model read text through its TextTokenizer (`TokenizerCache.get`), so
    that loading it before the first request pays; a family that builds its own reading of the
    folder (`Family.text_tokenizer` False) never needs that copy."""
    family = FAMILIES.get(config.family)
    return family is None or family.text_tokenizer


@contextlib.contextmanager
def _as_load_failure(config: ModelConfig) -> Iterator[None]:
    """A model whose tokenizer files are missing or unusable (none, a repository not cached, a marker
    token it lacks) fails to load, as a device load fails: 502 with the reason."""
    try:
        yield
    except ModelConfigError as exc:
        raise ModelLoadFailed(f"Model '{config.sie_id}' failed to load: {exc}") from None


def _load(config: ModelConfig, max_length: int | None = None) -> TextTokenizer:
    max_length = max_length or config.max_sequence_length or DEFAULT_MAX_LENGTH
    if config.is_weightless:  # no tokenizer.json: code points (encode and encode_pairs, what it serves)
        from sie.frontend.code_points import CodePointTokenizer  # deferred: it imports this module

        return CodePointTokenizer(max_length)  # type: ignore[return-value]
    path = resolve_tokenizer_file(config)
    if not config.profile().adapter_options.loadtime.get("append_eos"):
        return TextTokenizer(path, max_length)
    eos = eos_token_id(path.parent, Tokenizer.from_file(str(path)))
    return TextTokenizer(path, max_length, append_id=eos)
