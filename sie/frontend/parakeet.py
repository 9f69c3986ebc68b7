"""Parakeet-TDT token ids -> text, timed tokens, words and segments (the tokenizer side).

Built on the model's tokenizer.json alone (no transformers in a frontend), following
`transformers`' ParakeetProcessor for TDT: text is the tokenizer's decoding of the emitted ids
without the pad token and special tokens, repeats kept; each token's text comes from a decode
stream, and a punctuation token is moved to the end of the token before it (NeMo's TDT timestamp
refinement). Words and segments follow SIE's Parakeet adapter: a token starting with a space opens
a word; a segment ends at a word ending a sentence or once it spans 30 s; times have 3 decimals.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from sie.frontend.detokenize import clean_up_tokenization
from sie.frontend.model_files import token_content

# The punctuation ParakeetProcessor times at the end of the token before it.
REFINED_PUNCTUATION = frozenset({"?", "'", "¡", "¿", "-", ":", ",", "%", "/", ".", "!"})
# Sentence-final punctuation (. ! ? or an ellipsis), optionally followed by closing quotes or brackets.
_SENTENCE_END = re.compile(r"[.!?\u2026][\"'\u00bb\u201d\u2019)\]]*$")
MAX_SEGMENT_S = 30.0


@dataclass(frozen=True, slots=True)
class TimedToken:
    text: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class ParakeetVocab:
    tokenizer: Tokenizer
    skipped: frozenset[int]  # the pad and blank ids: never text, never timed
    clean_up: bool  # tokenizer_config.json's clean_up_tokenization_spaces (not for BPE models)

    @classmethod
    def from_folder(cls, tokenizer: Tokenizer, folder: Path) -> ParakeetVocab:
        config = _json(folder / "tokenizer_config.json")
        processor = _json(folder / "processor_config.json")
        skipped = {
            tokenizer.token_to_id(str(token))
            for token in (token_content(config.get("pad_token")), processor.get("blank_token", "<blank>"))
            if token is not None
        }
        is_bpe = type(tokenizer.model).__name__ == "BPE"
        clean_up = bool(config.get("clean_up_tokenization_spaces")) and not is_bpe
        return cls(tokenizer, frozenset(i for i in skipped if i is not None), clean_up)

    def text(self, ids: list[int]) -> str:
        """The transcript of emitted ids, as ParakeetProcessor.batch_decode gives it (stripped)."""
        text = self.tokenizer.decode([i for i in ids if i not in self.skipped], skip_special_tokens=True)
        return (clean_up_tokenization(text) if self.clean_up else text).strip()

    def timed_tokens(self, ids: list[int], times: list[tuple[float, float]]) -> list[TimedToken]:
        """Each emitted token's text and (start, end) seconds, as ParakeetProcessor.decode with
        durations gives them: tokens that decode to no text yet are dropped, punctuation is moved."""
        stream = DecodeStream(skip_special_tokens=True)
        out: list[TimedToken] = []
        for token, (start, end) in zip(ids, times, strict=True):
            if token in self.skipped:
                continue
            chunk = stream.step(self.tokenizer, token)
            if chunk is None:
                continue
            if chunk in REFINED_PUNCTUATION and out:
                start = end = out[-1].end
            out.append(TimedToken(chunk, start, end))
        return out


def shifted(tokens: list[TimedToken], offset_s: float, low: float, high: float) -> list[TimedToken]:
    """Tokens moved by `offset_s` (where their piece starts in the recording) and kept in [low, high]."""
    out = []
    for token in tokens:
        start = min(max(token.start + offset_s, low), high)
        out.append(TimedToken(token.text, start, min(max(token.end + offset_s, start), high)))
    return out


def words_of(tokens: list[TimedToken]) -> list[dict[str, Any]]:
    """Tokens merged into words (a token starting with a space opens one), times to 3 decimals."""
    merged: list[list[Any]] = []  # [text, start, end]
    for token in tokens:
        if not merged or token.text.startswith(" "):
            merged.append([token.text, token.start, token.end])
        else:
            merged[-1][0] += token.text
            merged[-1][2] = max(merged[-1][2], token.end)
    return [
        {"word": text.strip(), "start": round(start, 3), "end": round(end, 3)}
        for text, start, end in merged
        if text.strip()
    ]


def segments_of(words: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Words grouped into segments, each ending at a sentence's end or once it spans 30 s."""
    segments: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []
    for word in words:
        current.append(word)
        if _SENTENCE_END.search(word["word"]) or word["end"] - current[0]["start"] >= MAX_SEGMENT_S:
            segments.append(_segment(current, len(segments)))
            current = []
    if current:
        segments.append(_segment(current, len(segments)))
    return segments


def _segment(words: list[dict[str, Any]], index: int) -> dict[str, Any]:
    text = " ".join(word["word"] for word in words)
    return {"id": index, "start": words[0]["start"], "end": words[-1]["end"], "text": text}


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    return raw if isinstance(raw, dict) else {}
