"""GLiNER zero-shot spans, frontend half: the prompt and word split going in, the entities coming out.

A GLiNER uni-encoder span model reads `[CLS] <<ENT>> label1 <<ENT>> label2 ... <<SEP>> w1 w2 ... [SEP]`,
where the words come from a regex splitter and each is tokenized on its own. It scores every span
of up to `max_width` words against every label. The device returns those raw logits per item; this
module builds the prompt exactly as the `gliner` package's processor does and decodes the logits as
its `predict_entities` does (sigmoid, threshold, greedy choice of non-overlapping spans). Joint
entity-relation models add `<<REL>> relation ... <<SEP>>` to the prompt (sie/frontend/gliner_relex.py).

The per-token `aux` sent with the ids is gliner's `words_mask`: the 1-based index of a text word on
its selected sub-token (the first, with the usual `subtoken_pooling: first`), 0 elsewhere.

Where this differs from gliner, on purpose: a word that tokenizes to nothing (a lone zero-width
space) is dropped, and so are the words a `model_max_length` cut leaves without tokens. gliner keeps
both as positions with zero vectors, which shifts every later word onto its neighbour's embedding.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Encoding, Tokenizer, processors

from sie.errors import InvalidInput
from sie.frontend.model_files import token_content
from sie.frontend.tokenize import Encoded
from sie.model_location import folder_tokenizer_file, resolve_weights_dir

if TYPE_CHECKING:
    from sie.frontend.tokenize import TextTokenizer
    from sie.model_config import ModelConfig

# gliner's WhitespaceTokenSplitter (`words_splitter_type: whitespace`, the only splitter served).
WORD_PATTERN = re.compile(r"\w+(?:[-_]\w+)*|\S")
# transformers' LARGE_INTEGER: a tokenizer whose model_max_length is above it is never truncated.
NO_TRUNCATION_ABOVE = 10**20
SUBTOKEN_POOLINGS = ("first", "last", "mean", "max")


@dataclass(frozen=True, slots=True)
class GlinerSettings:
    """The fields of gliner_config.json the prompt and the decoding depend on."""

    ent_token: str = "<<ENT>>"
    sep_token: str = "<<SEP>>"
    max_width: int = 12
    max_len: int = 384  # words kept per text; gliner drops the rest
    subtoken_pooling: str = "first"
    rel_token: str | None = None  # joint entity-relation ("relex") models only: the relation marker

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> GlinerSettings:
        _check_architecture(raw)
        settings = cls(
            ent_token=str(raw.get("ent_token", cls.ent_token)),
            sep_token=str(raw.get("sep_token", cls.sep_token)),
            max_width=int(raw.get("max_width", cls.max_width)),
            max_len=int(raw.get("max_len", cls.max_len)),
            subtoken_pooling=str(raw.get("subtoken_pooling") or cls.subtoken_pooling),
            rel_token=str(raw.get("rel_token") or "<<REL>>") if is_relex(raw) else None,
        )
        if settings.subtoken_pooling not in SUBTOKEN_POOLINGS:
            raise ValueError(f"unknown GLiNER subtoken_pooling {settings.subtoken_pooling!r}")
        return settings


def is_relex(raw: dict[str, Any]) -> bool:
    """A joint entity-relation model: gliner builds one whenever the config names a relations layer."""
    return raw.get("relations_layer") is not None


def _check_architecture(raw: dict[str, Any]) -> None:
    """Only uni-encoder span models (gliner's UniEncoderSpanGLiNER and its relex kin) are served."""
    unsupported = [key for key in ("labels_encoder", "labels_decoder") if raw.get(key)]
    if raw.get("span_mode") == "token_level":
        unsupported.append("span_mode: token_level")
    if raw.get("precomputed_prompts_mode"):
        unsupported.append("precomputed_prompts_mode")
    if raw.get("model_type") == "gliner_streaming_span":
        unsupported.append("model_type: gliner_streaming_span")
    if unsupported:
        raise ValueError(f"GLiNER variant not supported (only uni-encoder span models): {unsupported}")
    check_word_splitter(raw)


def check_word_splitter(raw: Mapping[str, Any]) -> None:
    """Words are split as gliner's whitespace splitter splits them (split_words); no other splitter."""
    splitter = raw.get("words_splitter_type", "whitespace")
    if splitter != "whitespace":
        raise ValueError(f"GLiNER words_splitter_type {splitter!r} not supported (only 'whitespace')")


class GlinerPrompts:
    """Builds one model's inputs: prompt ids, per-token word indices, and each word's characters."""

    def __init__(self, tokenizer: Tokenizer, settings: GlinerSettings) -> None:
        self.settings = settings
        self._tokenizer = tokenizer  # no padding; truncation as gliner's tokenizer call does it
        ent_id = tokenizer.token_to_id(settings.ent_token)
        if ent_id is None or tokenizer.token_to_id(settings.sep_token) is None:
            raise ValueError(
                f"tokenizer lacks GLiNER's {settings.ent_token!r} / {settings.sep_token!r} tokens"
            )
        self.ent_token_id = ent_id
        self.rel_token_id = tokenizer.token_to_id(settings.rel_token) if settings.rel_token else None
        if settings.rel_token and self.rel_token_id is None:
            raise ValueError(f"tokenizer lacks GLiNER's {settings.rel_token!r} token")

    @classmethod
    def from_dir(cls, weights_dir: Path) -> GlinerPrompts:
        """From a saved GLiNER folder: gliner_config.json, tokenizer.json, tokenizer_config.json."""
        settings = GlinerSettings.from_config(_read_json(weights_dir / "gliner_config.json"))
        return cls(load_tokenizer(weights_dir), settings)

    @classmethod
    def for_model(cls, tokenizer: TextTokenizer, config: ModelConfig) -> GlinerPrompts:
        """A configured model's prompts. The shared `tokenizer` is not used: GLiNER tokenizes
        pre-split words and truncates at the tokenizer's own model_max_length, so a private copy is
        loaded from the weights folder."""
        del tokenizer
        return cls.from_dir(resolve_weights_dir(config))

    def encode(
        self, texts: Sequence[str], labels: Sequence[str], relation_labels: Sequence[str] = ()
    ) -> tuple[Encoded, list[list[tuple[int, int]]]]:
        """Token ids and words_mask (`aux`) per text, and the (start, end) characters of its words.

        Item i's words are those the model sees, so the device returns
        `len(words[i]) * max_width * len(unique_labels(labels))` logits for it (then, for a relex
        model, its relation candidates: see sie.frontend.gliner_relex).
        """
        labels = self._checked_labels(labels)
        relation_labels = self._checked_labels(relation_labels)
        prompt = prompt_words(labels, self.settings.ent_token, self.settings.sep_token)
        if self.settings.rel_token is not None:  # gliner's relex prompt: a second part, even when empty
            prompt += relation_words(relation_labels, self.settings.rel_token, self.settings.sep_token)
        elif relation_labels:
            raise ValueError("relation types for a GLiNER model without relations")
        words = [split_words(text, self.settings.max_len) for text in texts]
        batch = [
            prompt + [text[start:end] for start, end in spans]
            for text, spans in zip(texts, words, strict=True)
        ]
        encodings = self._tokenizer.encode_batch(batch, is_pretokenized=True, add_special_tokens=True)
        masks, kept = [], []
        for encoding, spans in zip(encodings, words, strict=True):
            self._check_prompt(encoding, len(prompt), len(labels), len(relation_labels))
            mask, kept_words = words_mask(encoding.word_ids, len(prompt), self.settings.subtoken_pooling)
            masks.append(mask)
            kept.append([spans[w] for w in kept_words])
        return _flatten(encodings, masks), kept

    def _checked_labels(self, labels: Sequence[str]) -> list[str]:
        markers = tuple(
            m for m in (self.settings.ent_token, self.settings.sep_token, self.settings.rel_token) if m
        )
        if any(marker in label for label in labels for marker in markers):
            raise InvalidInput(f"labels must not contain GLiNER's marker tokens {markers}")
        return unique_labels(labels)

    def _check_prompt(self, encoding: Encoding, n_prompt_words: int, n_labels: int, n_relations: int) -> None:
        # The device reads an item's label (relation) count from its <<ENT>> (<<REL>>) tokens; a
        # prompt cut by the tokenizer's max length would disagree with the labels asked for.
        word_ids = encoding.word_ids
        has_sep = (n_prompt_words - 1) in word_ids
        in_prompt = [
            token
            for token, word in zip(encoding.ids, word_ids, strict=True)
            if word is not None and word < n_prompt_words
        ]
        n_ent = in_prompt.count(self.ent_token_id)
        n_rel = in_prompt.count(self.rel_token_id) if self.rel_token_id is not None else 0
        if not has_sep or n_ent != n_labels or n_rel != n_relations:
            raise InvalidInput("the labels do not fit in the model's maximum input length")


def unique_labels(labels: Sequence[str]) -> list[str]:
    """gliner de-duplicates labels, keeping the first occurrence's place."""
    return list(dict.fromkeys(labels))


def prompt_words(labels: Sequence[str], ent_token: str, sep_token: str) -> list[str]:
    words: list[str] = []
    for label in labels:
        words.append(ent_token)
        if label:  # gliner: an empty label gives a bare <<ENT>>
            words.append(label)
    words.append(sep_token)
    return words


def relation_words(relation_labels: Sequence[str], rel_token: str, sep_token: str) -> list[str]:
    """The relex prompt's second part: `<<REL>> relation` per relation type, then <<SEP>>."""
    words = [word for label in relation_labels for word in (rel_token, label)]
    return [*words, sep_token]


def split_words(text: str, max_len: int) -> list[tuple[int, int]]:
    """(start, end) of each word gliner's whitespace splitter finds, the first `max_len` of them."""
    spans = []
    for match in WORD_PATTERN.finditer(text):
        if len(spans) == max_len:
            break
        spans.append(match.span())
    return spans


def words_mask(
    word_ids: list[int | None], n_prompt_words: int, pooling: str
) -> tuple[np.ndarray, np.ndarray]:
    """gliner's words_mask for one sequence, and which text words (0-based) it numbers.

    A word is numbered from 1 after the prompt's words, on its first sub-token ("first"), its last
    ("last") or all of them ("mean", "max"); special tokens and prompt tokens get 0. Words with no
    tokens are skipped in the numbering (see the module docstring).
    """
    wid = np.fromiter((-1 if w is None else w for w in word_ids), np.int64, len(word_ids))
    is_word = wid >= 0
    previous = np.concatenate(([-1], wid[:-1]))
    following = np.concatenate((wid[1:], [-1]))
    is_first = is_word & (wid != previous)
    seen = np.cumsum(is_first)  # word ids ascend, so each new id is one more word seen
    is_text = wid >= n_prompt_words
    n_prompt_seen = int(np.count_nonzero(is_first & is_word & ~is_text))
    if pooling == "first":
        selected = is_first
    elif pooling == "last":
        selected = is_word & (wid != following)
    else:
        selected = is_word
    mask = np.where(is_text & selected, seen - n_prompt_seen, 0).astype(np.int32)
    kept = np.unique(wid[is_text]) - n_prompt_words
    return mask, kept


@dataclass(frozen=True, slots=True)
class Span:
    start: int  # first word
    end: int  # last word (inclusive)
    label: int
    score: float


def decode(
    scores: np.ndarray,
    n_words: int,
    labels: Sequence[str],
    words: Sequence[tuple[int, int]],
    text: str,
    threshold: float,
    flat_ner: bool = True,
    multi_label: bool = False,
) -> list[dict[str, Any]]:
    """Entities from one item's raw span logits, as gliner's `predict_entities` picks them.

    `scores` holds `n_words * max_width * n_labels` logits in (word, width, label) order. A span
    is a candidate when its sigmoid exceeds `threshold` and it ends inside the text; candidates are
    taken best first, skipping any that overlaps one already taken (with `flat_ner`; otherwise only
    partial overlaps are skipped and nesting is allowed). Unless `multi_label`, a span gets one label.
    """
    labels = unique_labels(labels)
    chosen = decode_spans(scores, n_words, len(labels), threshold, flat_ner, multi_label)
    return [entity_of(span, labels, words, text) for span in chosen]


def decode_spans(
    scores: np.ndarray, n_words: int, n_labels: int, threshold: float, flat_ner: bool, multi_label: bool
) -> list[Span]:
    """The spans `decode` makes entities of, in order of their first word."""
    if n_words == 0 or not n_labels:
        return []
    logits = np.asarray(scores, dtype=np.float32).reshape(n_words, -1, n_labels)
    with np.errstate(over="ignore"):  # exp(88+) is inf in float32, and 1 / inf is the right 0
        probs = 1.0 / (1.0 + np.exp(-logits))
    starts, widths, classes = np.nonzero(probs > np.float32(threshold))
    inside = starts + widths < n_words
    starts, widths, classes = starts[inside], widths[inside], classes[inside]
    candidates = [
        Span(int(s), int(s + w), int(c), float(p))
        for s, w, c, p in zip(starts, widths, classes, probs[starts, widths, classes], strict=True)
    ]
    return greedy(candidates, flat_ner, multi_label)


def greedy(candidates: list[Span], flat_ner: bool, multi_label: bool) -> list[Span]:
    """gliner's greedy_search: best score first (ties in span order), then sorted by start."""
    chosen: list[Span] = []
    for span in sorted(candidates, key=lambda s: -s.score):
        if not any(_conflicts(span, other, flat_ner, multi_label) for other in chosen):
            chosen.append(span)
    chosen.sort(key=lambda s: s.start)
    return chosen


def _conflicts(a: Span, b: Span, flat_ner: bool, multi_label: bool) -> bool:
    if (a.start, a.end) == (b.start, b.end):
        return not multi_label
    apart = a.start > b.end or b.start > a.end
    if flat_ner:
        return not apart
    nested = (a.start <= b.start and a.end >= b.end) or (b.start <= a.start and b.end >= a.end)
    return not (apart or nested)


def entity_of(span: Span, labels: list[str], words: Sequence[tuple[int, int]], text: str) -> dict[str, Any]:
    start, end = words[span.start][0], words[span.end][1]
    return {
        "text": text[start:end],
        "label": labels[span.label],
        "score": span.score,
        "start": start,
        "end": end,
        "bbox": None,
    }


def _flatten(encodings: list[Encoding], masks: list[np.ndarray]) -> Encoded:
    lengths = np.fromiter((len(e.ids) for e in encodings), np.int32, len(encodings))
    offsets = np.zeros(len(encodings) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    n_tokens = int(offsets[-1])
    input_ids = np.fromiter((t for e in encodings for t in e.ids), np.int32, n_tokens)
    aux = np.concatenate(masks) if masks else np.zeros(0, np.int32)
    # Token types stay 0: gliner calls its encoder without them.
    return Encoded(offsets, input_ids, None, n_tokens, aux)


def load_tokenizer(weights_dir: Path) -> Tokenizer:
    """tokenizer.json as gliner's transformers tokenizer uses it: no padding, truncation at
    tokenizer_config.json's model_max_length, and gliner's bos/eos post-processor override."""
    tokenizer = Tokenizer.from_file(str(folder_tokenizer_file(weights_dir)))  # or the converted one
    tokenizer.no_padding()
    config = _read_json(weights_dir / "tokenizer_config.json", missing_ok=True)
    max_length = config.get("model_max_length")
    if isinstance(max_length, int) and max_length <= NO_TRUNCATION_ABOVE:
        tokenizer.enable_truncation(max_length)
    else:
        tokenizer.no_truncation()
    # transformers takes special_tokens_map.json's tokens over tokenizer_config.json's.
    special = {**config, **_read_json(weights_dir / "special_tokens_map.json", missing_ok=True)}
    bos, eos = token_content(special.get("bos_token")), token_content(special.get("eos_token"))
    _apply_bos_eos(tokenizer, bos, eos)
    return tokenizer


def _apply_bos_eos(tokenizer: Tokenizer, bos: str | None, eos: str | None) -> None:
    """Mirror gliner's `_set_tokenizer_spec_tokens`: a tokenizer that defines a bos (eos) token gets
    transformers' `bos $A eos` post-processor. (DeBERTa's [CLS]/[SEP] give its usual one back.)"""
    bos_id = tokenizer.token_to_id(bos) if bos else None
    eos_id = tokenizer.token_to_id(eos) if eos else None
    if bos_id is None and eos_id is None:
        return  # gliner leaves such a tokenizer as it is
    marks = [(token, token_id) for token, token_id in ((bos, bos_id), (eos, eos_id)) if token_id is not None]
    first = f"{bos}:0 " if bos_id is not None else ""
    last = f" {eos}:0" if eos_id is not None else ""
    single = f"{first}$A:0{last}"
    pair = f"{single} {first.replace(':0', ':1')}$B:1{last.replace(':0', ':1')}"
    tokenizer.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=marks)


def _read_json(path: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    if missing_ok and not path.is_file():
        return {}
    with path.open() as fh:
        raw = json.load(fh)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return raw


def merge_adjacent(entities: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Entities of one label that touch or are one character apart, joined into one span (in order
    of start) with the higher score: what SIE's `merge_adjacent_entities` gives."""
    merged: list[dict[str, Any]] = []
    for entity in sorted(entities, key=lambda e: e["start"]):
        last = merged[-1] if merged else None
        if last is not None and last["label"] == entity["label"] and entity["start"] <= last["end"] + 1:
            end = max(last["end"], entity["end"])
            merged[-1] = {
                **last,
                "text": text[last["start"] : end],
                "end": end,
                "score": max(last["score"], entity["score"]),
            }
        else:
            merged.append(entity)
    return merged
