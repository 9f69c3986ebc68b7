"""Grounding DINO's text side and its boxes: the prompt, its tokens, and rows back to objects.

The prompt is transformers' (and SIE's) for a label list: each label stripped and lower-cased,
each ending in ". " ("a cat. a dog."), tokenized by the model's BERT tokenizer. The device
returns, per query of one image, [cx, cy, w, h, logit per prompt token]; here, as
`post_process_grounded_object_detection`: a query's score is the sigmoid of its best token,
kept above the box threshold; its phrase is the prompt tokens (less the first and the model's
last position) above the text threshold, decoded; boxes become corners in the original image's
pixels. SIE then names each object by the request's label its phrase shares most words with
(the phrase itself when it shares none), so labels come back as the caller wrote them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InvalidInput
from sie.frontend.detokenize import clean_up_tokenization
from sie.frontend.model_files import read_json_object

DEFAULT_MAX_TEXT_LEN = 256  # GroundingDinoConfig.max_text_len: the text tokens a box is scored on
_WORD = re.compile(r"\w+")


def prompt_of(labels: list[str]) -> str:
    return " ".join(f"{label.strip().lower()}." for label in labels)


@dataclass(frozen=True, slots=True)
class GroundingPrompts:
    """One model's prompt tokenizer and phrase decoder."""

    tokenizer: Tokenizer  # no truncation, no padding: an over-long prompt is refused, not cut
    max_text_len: int
    clean_up: bool

    @classmethod
    def for_model(cls, folder: Path, tokenizer_json: Path) -> GroundingPrompts:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        config = read_json_object(folder / "config.json")
        tokenizer_config = read_json_object(tokenizer_json.parent / "tokenizer_config.json")
        return cls(
            tokenizer=tokenizer,
            max_text_len=int(config.get("max_text_len") or DEFAULT_MAX_TEXT_LEN),
            clean_up=bool(tokenizer_config.get("clean_up_tokenization_spaces", False)),
        )

    def encode(self, labels: list[str]) -> np.ndarray:
        """The prompt's token ids; more than the model reads is a 400 (it would drop labels)."""
        ids = self.tokenizer.encode(prompt_of(labels)).ids
        if len(ids) > self.max_text_len:
            raise InvalidInput(
                f"params.labels make a prompt of {len(ids)} tokens; the model reads at most "
                f"{self.max_text_len} (use fewer or shorter labels)"
            )
        return np.asarray(ids, np.int32)

    def phrase(self, ids: list[int]) -> str:
        """transformers' decode: special tokens kept, spaces cleaned where the tokenizer says."""
        text: str = self.tokenizer.decode(ids, skip_special_tokens=False)
        return clean_up_tokenization(text) if self.clean_up else text


def canonical_label(phrase: str, labels: list[str]) -> str:
    """The label whose words the phrase covers best (share, then count; the earlier on a tie),
    or the phrase when it shares no word with any label (SIE's rule)."""
    words = set(_WORD.findall(phrase.lower()))
    best, best_key = phrase, (0.0, 0)
    for label in labels:
        label_words = set(_WORD.findall(label.lower()))
        if not label_words:
            continue
        matched = len(label_words & words)
        key = (matched / len(label_words), matched)
        if key > best_key:
            best, best_key = label, key
    return best


@dataclass(frozen=True, slots=True)
class Thresholds:
    box: float
    text: float


def objects_of(
    rows: np.ndarray,
    prompt: np.ndarray,
    size: tuple[int, int],
    labels: list[str],
    thresholds: Thresholds,
    prompts: GroundingPrompts,
) -> list[dict[str, Any]]:
    """One image's query rows [cx, cy, w, h, logits...] -> objects above the box threshold, best first."""
    n_tokens = len(prompt)
    probs = _sigmoid(rows[:, 4 : 4 + n_tokens].astype(np.float64))
    scores = probs.max(axis=1) if n_tokens else np.zeros(len(rows))
    keep = np.flatnonzero(scores > thresholds.box)
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    width, height = size
    cx, cy, w, h = (rows[keep, k].astype(np.float64) for k in range(4))
    corners = np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1)
    corners *= np.array([width, height, width, height], np.float64)
    # The phrase skips the first token ([CLS]) and the model's last text position, as transformers.
    stop = min(n_tokens, prompts.max_text_len - 1)
    tokens = prompt.tolist()
    objects = []
    for query, box in zip(keep.tolist(), corners, strict=True):
        above = np.flatnonzero(probs[query, 1:stop] > thresholds.text) + 1
        phrase = prompts.phrase([tokens[j] for j in above.tolist()])
        objects.append(
            {
                "label": canonical_label(phrase, labels),
                "score": float(scores[query]),
                "corners": [float(v) for v in box],
            }
        )
    return objects


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow warnings for large or infinite logits
