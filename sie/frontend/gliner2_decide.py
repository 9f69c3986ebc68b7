"""GLiNER2.5-Decide rows: every task of a request, then [SEP_TEXT] and the item's document, in one
row of at most the model's window of tokens.

The task prompt is gliner2's (sie/frontend/gliner2.py builds it), the same for every item of a
request. The document follows as gliner2 reads a text (a "." appended when it ends in no sentence
end, words lowercased and tokenized one by one), cut to the whole words that fit in the rest of
the window. A text is read from its start; a list of conversation turns (`metadata.state`) from
its end, so the newest turns are kept. The aux marks each [L] marker with -1: the device scores
the label at each, in order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sie.errors import InputTooLong
from sie.frontend.gliner2 import Gliner2Prompts, model_text, split_words
from sie.frontend.gliner2_decisions import Decisions
from sie.frontend.tokenize import Encoded

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

DEFAULT_WINDOW = 512
DEFAULT_MAX_PROMPT_TOKENS = 512
LABEL_MARKER = "[L]"
# A document word longer than this ends the part the model reads, as does reading past this many
# characters, or words, per token of room: such text fills no window, and reading on costs time.
MAX_WORD_CHARS = 4096
MAX_CHARS_PER_TOKEN = 64
MAX_WORDS_PER_TOKEN = 4
_SPACE = re.compile(r"\s")


@dataclass(frozen=True, slots=True)
class Prefix:
    """A request's task prompt up to [SEP_TEXT]: ids, aux (-1 at each label marker), and the tokens of
    the caller's free text in it (prompts and descriptions), which count as input tokens."""

    ids: np.ndarray
    aux: np.ndarray
    free_tokens: int


@dataclass(frozen=True, slots=True)
class Document:
    """The part of an item the model reads: its tokens, those of the caller's own text (not the
    appended "."), and whether it is the whole item."""

    ids: np.ndarray
    own_tokens: int
    complete: bool


class DecideRows:
    def __init__(self, prompts: Gliner2Prompts, window: int, max_prompt_tokens: int) -> None:
        if not 0 < max_prompt_tokens < window:
            raise ValueError("GLiNER2.5-Decide needs 0 < max_prompt_tokens < max_sequence_length")
        self.prompts = prompts
        self.window = window
        self.max_prompt_tokens = max_prompt_tokens
        (self._label_id,) = prompts.pieces(LABEL_MARKER)

    @classmethod
    def for_model(cls, config: ModelConfig) -> DecideRows:
        prompts = Gliner2Prompts.for_model(config)
        window = config.max_sequence_length or DEFAULT_WINDOW
        if prompts.limits.max_row_tokens:  # an encoder of absolute positions holds no more
            window = min(window, prompts.limits.max_row_tokens)
        asked = config.profile().adapter_options.loadtime.get("max_prompt_tokens")
        if asked is not None and (isinstance(asked, bool) or not isinstance(asked, int)):
            raise ValueError(f"GLiNER2.5-Decide max_prompt_tokens must be an integer, not {asked!r}")
        return cls(prompts, window, asked or min(window // 2, DEFAULT_MAX_PROMPT_TOKENS))

    def prefix(self, decisions: Decisions) -> Prefix:
        ids, roles = self.prompts.schema_ids([task.schema() for task in decisions.tasks])
        if len(ids) > self.max_prompt_tokens:
            raise InputTooLong(
                f"GLiNER2.5-Decide's questions and labels take {len(ids)} tokens; this model takes at "
                f"most {self.max_prompt_tokens} of its {self.window}-token window. Send fewer or shorter "
                "questions, labels, instructions or descriptions"
            )
        aux = np.where((roles < 0) & (ids == self._label_id), -1, 0)
        free = sum(len(self.prompts.pieces(text)) for task in decisions.tasks for text in task.free_texts())
        return Prefix(ids, aux, free)

    def document(self, text: str, room: int, *, from_end: bool) -> Document:
        """The whole words of `text` (from its end for `from_end`) whose tokens fit in `room`."""
        seen = model_text(text)
        char_limit = room * MAX_CHARS_PER_TOKEN
        part, offset = reachable(seen, char_limit + MAX_WORD_CHARS, from_end=from_end)
        words, spans = split_words(part)
        spans = [(start + offset, end + offset) for start, end in spans]
        order = range(len(words) - 1, -1, -1) if from_end else range(len(words))
        kept: list[int] = []
        pieces: list[list[int]] = []
        used = 0
        complete = len(part) == len(seen)
        for n, i in enumerate(order):
            start, end = spans[i]
            reach = len(seen) - start if from_end else end
            if end - start > MAX_WORD_CHARS or reach > char_limit or n >= room * MAX_WORDS_PER_TOKEN:
                complete = False
                break
            sub = self.prompts.pieces(words[i])
            if used + len(sub) > room:
                # Missing only the appended "." still reads the caller's whole text.
                complete = complete and not from_end and start >= len(text)
                break
            kept.append(i)
            pieces.append(sub)
            used += len(sub)
        if from_end:
            kept.reverse()
            pieces.reverse()
        ids = np.fromiter((t for sub in pieces for t in sub), np.int64, used)
        own = sum(len(sub) for i, sub in zip(kept, pieces, strict=True) if spans[i][0] < len(text))
        return Document(ids, own, complete)

    def encode(self, prefix: Prefix, documents: Sequence[Document]) -> Encoded:
        """Each item's row: the prefix, then its document."""
        lengths = np.array([len(prefix.ids) + len(d.ids) for d in documents], np.int32)
        offsets = np.zeros(len(documents) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        input_ids = np.concatenate([part for d in documents for part in (prefix.ids, d.ids)]).astype(np.int32)
        aux = np.concatenate(
            [part for d in documents for part in (prefix.aux, np.zeros(len(d.ids), np.int64))]
        ).astype(np.int32)
        return Encoded(offsets, input_ids, None, int(offsets[-1]), aux)


def reachable(text: str, reach: int, *, from_end: bool) -> tuple[str, int]:
    """The part of `text` a row can read, and where it starts: the first (or last) `reach`
    characters, cut at a space. No word crosses a space, so the part splits into the same words as
    the whole text does there, and a huge text costs no more splitting than a row can use."""
    if len(text) <= reach:
        return text, 0
    if from_end:
        space = _SPACE.search(text, len(text) - reach, len(text) - reach + MAX_WORD_CHARS)
        start = space.end() if space else len(text) - reach
        return text[start:], start
    cut = max((m.start() for m in _SPACE.finditer(text, reach - MAX_WORD_CHARS, reach)), default=reach)
    return text[:cut], 0
