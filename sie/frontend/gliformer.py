"""GLiFormer entity extraction, frontend half: the prompt and word split going in, the entities out.

A GLiFormer text model reads `[CLS] [SEQ] [SCHEMA] "[ENTITY] label1" "[ENTITY] label2" ... [SEP] [SEP]
w1 w2 ... [SEP]`, each prompt entry and each text word tokenized as one pre-split word, the whole
sequence cut at the config's `max_len` tokens. Its NER head scores every (word, label) with three
logits: start, end, inside. The device returns those per item; this module builds the prompt as the
`gliformer` package's processor does and decodes spans as its BIO span decoder does (a start and an
end of one label, every word between inside, the span's score the least of those probabilities and
of "not inside" just outside it), then picks spans greedily like GLiNER.

Only entity extraction with one label list is served: relations, classification and structured
output need heads whose prompts and decoders are not built here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InvalidInput
from sie.frontend.gliner import (
    WORD_PATTERN,
    Span,
    entity_of,
    greedy,
    load_tokenizer,
    unique_labels,
    words_mask,
)
from sie.frontend.tokenize import Encoded
from sie.model_location import resolve_weights_dir

if TYPE_CHECKING:
    from sie.frontend.tokenize import TextTokenizer
    from sie.model_config import ModelConfig

DEFAULT_THRESHOLD = 0.5
# SIE's floor for span thresholds: candidate spans multiply as it falls, and decoding pairs them.
MIN_THRESHOLD = 0.1


@dataclass(frozen=True, slots=True)
class GliformerSettings:
    """What gliner_config.json says about the prompt and the word split."""

    seq_token: str
    parent_token: str
    ent_token: str
    sep_token: str
    max_len: int
    subtoken_pooling: str

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> GliformerSettings:
        splitter = raw.get("words_splitter_type", "whitespace")
        if splitter != "whitespace":
            raise ValueError(f"GLiFormer words_splitter_type {splitter!r} not supported (only whitespace)")
        if raw.get("model_variant", "text") != "text" or raw.get("labels_encoder"):
            raise ValueError("only GLiFormer text uni-encoder models are served")
        # The NER prompt opens with the entity task's own parent token when the config has one.
        shared_parent = (
            "[ENTITY_SCHEMA]" if raw.get("per_task_parents") is True else raw.get("parent_token", "[SCHEMA]")
        )
        return cls(
            seq_token=raw.get("seq_token", "[SEQ]"),
            parent_token=raw.get("ner_parent_token") or shared_parent,
            ent_token=raw.get("ent_token", "[ENTITY]"),
            sep_token=raw.get("sep_token", "[SEP]"),
            max_len=int(raw.get("max_len", 512)),
            subtoken_pooling=raw.get("subtoken_pooling", "first"),
        )


class GliformerPrompts:
    """Builds one model's inputs: ids, per-token word indices (aux), and each kept word's characters."""

    def __init__(self, tokenizer: Tokenizer, settings: GliformerSettings) -> None:
        self.settings = settings
        self._tokenizer = tokenizer
        # The package's tokenizer call cuts prompt and text together at max_len tokens.
        tokenizer.enable_truncation(settings.max_len)
        ent_id = tokenizer.token_to_id(settings.ent_token)
        if ent_id is None:
            raise ValueError(f"tokenizer lacks GLiFormer's {settings.ent_token!r} token")
        self.ent_token_id = ent_id

    @classmethod
    def from_dir(cls, weights_dir: Path) -> GliformerPrompts:
        raw = json.loads((weights_dir / "gliner_config.json").read_text())
        return cls(load_tokenizer(weights_dir), GliformerSettings.from_config(raw))

    @classmethod
    def for_model(cls, tokenizer: TextTokenizer, config: ModelConfig) -> GliformerPrompts:
        """A private tokenizer copy: GLiFormer tokenizes pre-split words with its own cut."""
        del tokenizer
        return cls.from_dir(resolve_weights_dir(config))

    def prompt(self, labels: Sequence[str]) -> list[str]:
        s = self.settings
        return [
            s.seq_token,
            s.parent_token,
            *(f"{s.ent_token} {label}" for label in labels),
            s.sep_token,
            s.sep_token,
        ]

    def encode(
        self, texts: Sequence[str], labels: Sequence[str]
    ) -> tuple[Encoded, list[list[tuple[int, int]]]]:
        """Token ids with words_mask aux, and the (start, end) characters of the words the model sees."""
        labels = checked_labels(labels, self.settings)
        prompt = self.prompt(labels)
        words = [[m.span() for m in WORD_PATTERN.finditer(text)] for text in texts]
        if any(not spans for spans in words):
            raise InvalidInput("GLiFormer requires non-blank text")
        batch = [prompt + [text[a:b] for a, b in spans] for text, spans in zip(texts, words, strict=True)]
        encodings = self._tokenizer.encode_batch(batch, is_pretokenized=True, add_special_tokens=True)
        masks, kept = [], []
        for encoding, spans in zip(encodings, words, strict=True):
            ids = np.asarray(encoding.ids)
            # The device reads the label count from the [ENTITY] tokens; a cut prompt would disagree.
            if (
                int((ids == self.ent_token_id).sum()) != len(labels)
                or len(prompt) - 1 not in encoding.word_ids
            ):
                raise InvalidInput("the labels do not fit in the model's maximum input length")
            mask, kept_words = words_mask(encoding.word_ids, len(prompt), self.settings.subtoken_pooling)
            if not len(kept_words):
                raise InvalidInput("the labels leave no room for text in the model's maximum input length")
            masks.append(mask)
            kept.append([spans[w] for w in kept_words])
        lengths = np.fromiter((len(e.ids) for e in encodings), np.int32, len(encodings))
        offsets = np.zeros(len(encodings) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.fromiter((t for e in encodings for t in e.ids), np.int32, int(offsets[-1]))
        return Encoded(offsets, ids, None, int(offsets[-1]), np.concatenate(masks)), kept


def checked_labels(labels: Sequence[str], settings: GliformerSettings) -> list[str]:
    markers = (settings.ent_token, settings.sep_token, settings.seq_token, settings.parent_token)
    if any(not label.strip() for label in labels):
        raise InvalidInput("GLiFormer labels must be non-empty strings")
    if any(marker in label for label in labels for marker in markers):
        raise InvalidInput(f"labels must not contain GLiFormer's marker tokens {markers}")
    return unique_labels(labels)


def decode(
    scores: np.ndarray,
    labels: Sequence[str],
    words: Sequence[tuple[int, int]],
    text: str,
    threshold: float,
    flat_ner: bool = True,
    multi_label: bool = False,
) -> list[dict[str, Any]]:
    """Entities from one item's `[n_words * n_labels, 3]` (start, end, inside) logits."""
    labels = unique_labels(labels)
    if not words:
        return []
    logits = np.asarray(scores, dtype=np.float32).reshape(len(words), len(labels), 3)
    with np.errstate(over="ignore"):
        probs = 1.0 / (1.0 + np.exp(-logits))
    chosen = greedy(bio_spans(probs, np.float32(threshold)), flat_ner, multi_label)
    return [entity_of(span, labels, words, text) for span in chosen]


def bio_spans(probs: np.ndarray, threshold: np.float32) -> list[Span]:
    """Candidate spans in the package's order: starts then ends, each in (word, label) order."""
    start, end, inside = probs[..., 0], probs[..., 1], probs[..., 2]
    n_words = probs.shape[0]
    ends = list(zip(*np.nonzero(end > threshold), strict=True))
    spans = []
    for st, label in zip(*np.nonzero(start > threshold), strict=True):
        for ed, label_end in ends:
            if ed < st or label_end != label:
                continue
            ins = inside[st : ed + 1, label]
            if (ins < threshold).any():
                continue
            parts = [ins.min(), start[st, label], end[ed, label]]
            if st > 0:
                parts.append(np.float32(1.0) - inside[st - 1, label])
            if ed + 1 < n_words:
                parts.append(np.float32(1.0) - inside[ed + 1, label])
            spans.append(Span(int(st), int(ed), int(label), float(min(parts))))
    return spans
