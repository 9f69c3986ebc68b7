"""Whisper token ids -> text, language, segments and words (the tokenizer side of transcription).

Built on the model's tokenizer.json alone (no transformers in a frontend), following
`transformers`' WhisperTokenizer: timestamp tokens start right after <|notimestamps|> at 0.02 s
each; segments are the runs between consecutive timestamp tokens (its `_compute_offsets`, the
offsets `decode(output_offsets=True)` returns); words group sub-word tokens at spaces and
punctuation and merge punctuation into the neighbouring word (its `_combine_tokens_into_words`),
each word timed from the token start times the device measured.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

TIME_PRECISION = 0.02
SEGMENT_POSITIONS = 1500  # a 30 s window in timestamp positions
PREPENDED = "\"'“¡¿([{-"
APPENDED = "\"'.。,，!！?？:：”)]}、"  # noqa: RUF001 (transformers' list, full-width marks included)
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_LANGUAGE = re.compile(r"^<\|([a-z]{2,3})\|>$")


@dataclass(frozen=True, slots=True)
class WhisperVocab:
    tokenizer: Tokenizer
    start: int  # <|startoftranscript|>
    end: int  # <|endoftext|>
    no_timestamps: int
    languages: dict[str, int]  # "en" -> the id of <|en|>

    @classmethod
    def from_tokenizer(cls, tokenizer: Tokenizer) -> WhisperVocab:
        ids = {token: tokenizer.token_to_id(token) for token in ("<|startoftranscript|>", "<|endoftext|>")}
        no_timestamps = tokenizer.token_to_id("<|notimestamps|>")
        if None in ids.values() or no_timestamps is None:
            raise ValueError("tokenizer.json is not a Whisper tokenizer (special tokens missing)")
        languages = {}
        for token_id, added in tokenizer.get_added_tokens_decoder().items():
            found = _LANGUAGE.match(added.content)
            if found and added.special:
                languages[found.group(1)] = token_id
        return cls(tokenizer, ids["<|startoftranscript|>"], ids["<|endoftext|>"], no_timestamps, languages)

    @property
    def timestamp_begin(self) -> int:
        return self.no_timestamps + 1

    def language_of(self, token: int) -> str | None:
        return next((code for code, i in self.languages.items() if i == token), None)

    def text(self, ids: list[int]) -> str:
        """Decoded text without special or timestamp tokens."""
        return self.tokenizer.decode([i for i in ids if i < self.end], skip_special_tokens=True)

    def segments(self, ids: list[int], offset_s: float = 0.0) -> list[dict[str, Any]]:
        """transformers' `_compute_offsets`: text between timestamp pairs, timed, shifted by offset_s."""
        tokens = np.asarray(ids, np.int64)
        stamps = tokens >= self.timestamp_begin
        consecutive = list(np.flatnonzero(stamps[:-1] & stamps[1:]) + 1)
        if not consecutive and stamps.sum() <= 1:
            return []
        last_stamp = int(np.flatnonzero(stamps)[-1]) + 1
        if last_stamp not in consecutive:
            consecutive.append(last_stamp)
        last_slice, cur_max, previous_len = int(np.flatnonzero(stamps)[0]), 0, 0
        out: list[dict[str, Any]] = []
        for current in consecutive:
            sliced = tokens[last_slice:current]
            if len(sliced) > 1:
                start, end = int(sliced[0]) - self.timestamp_begin, int(sliced[-1]) - self.timestamp_begin
                if start < cur_max:  # a new decoding pass of the window started
                    single_ending = last_slice >= 2 and not (
                        stamps[last_slice - 2] and stamps[last_slice - 1]
                    )
                    previous_len += SEGMENT_POSITIONS if single_ending else cur_max
                cur_max = end
                out.append(
                    {
                        "start": _seconds((start + previous_len) * TIME_PRECISION + offset_s),
                        "end": _seconds((end + previous_len) * TIME_PRECISION + offset_s),
                        "text": self.text(sliced.tolist()),
                    }
                )
            last_slice = current
        return out

    def words(self, ids: list[int], starts: list[float], offset_s: float = 0.0) -> list[dict[str, Any]]:
        """Words with times: token i spans [starts[i - 1], starts[i]] (transformers' pipeline)."""
        regular = [(i, token) for i, token in enumerate(ids) if token < self.end]
        spans = [((starts[i - 1] if i else 0.0), starts[i]) for i, _ in regular]
        words = self._combine([token for _, token in regular])
        return [
            {
                "word": word,
                "start": _seconds(spans[indices[0]][0] + offset_s),
                "end": _seconds(spans[indices[-1]][1] + offset_s),
            }
            for word, indices in words
            if not any(math.isnan(v) for v in (spans[indices[0]][0], spans[indices[-1]][1]))
        ]

    def _combine(self, tokens: list[int]) -> list[tuple[str, list[int]]]:
        words: list[tuple[str, list[int]]] = []
        for subword, indices in self._split_unicode(tokens):
            starts_word = subword.startswith(" ") or subword.strip() in PUNCTUATION or not words
            if starts_word:
                words.append((subword, indices))
            else:
                words[-1] = (words[-1][0] + subword, words[-1][1] + indices)
        return _merge_punctuation(words)

    def _split_unicode(self, tokens: list[int]) -> list[tuple[str, list[int]]]:
        """Runs of tokens that decode to whole characters (a character may span byte tokens)."""
        full = self.tokenizer.decode(tokens, skip_special_tokens=False)
        out: list[tuple[str, list[int]]] = []
        current: list[int] = []
        offset = 0
        for index in range(len(tokens)):
            current.append(index)
            decoded = self.tokenizer.decode([tokens[i] for i in current], skip_special_tokens=False)
            bad = decoded.find("\ufffd")
            if bad < 0 or offset + bad >= len(full) or full[offset + bad] == "\ufffd":
                out.append((decoded, current))
                current = []
                offset += len(decoded)
        return out


def _merge_punctuation(words: list[tuple[str, list[int]]]) -> list[tuple[str, list[int]]]:
    texts = [w for w, _ in words]
    indices = [i for _, i in words]
    i, j = len(texts) - 2, len(texts) - 1
    while i >= 0:  # opening punctuation joins the word after it
        if texts[i].startswith(" ") and texts[i].strip() in PREPENDED:
            texts[j], indices[j] = texts[i] + texts[j], indices[i] + indices[j]
            texts[i], indices[i] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(texts):  # closing punctuation joins the word before it
        if not texts[i].endswith(" ") and texts[j] in APPENDED:
            texts[i], indices[i] = texts[i] + texts[j], indices[i] + indices[j]
            texts[j], indices[j] = "", []
        else:
            i = j
        j += 1
    return [(t, idx) for t, idx in zip(texts, indices, strict=True) if t]


def _seconds(value: float) -> float:
    return round(float(value), 2)
