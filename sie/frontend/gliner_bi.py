"""GLiNER bi-encoder, frontend half going in: each text's words and the labels, as the device reads them.

A bi-encoder (gliner's BiEncoderSpanGLiNER, knowledgator/gliner-bi-*) reads the text alone, with no
label prompt, through its text encoder, and each label on its own through a second, sentence-embedding
encoder with its own tokenizer (`labels_encoder` in gliner_config.json, e.g. BAAI/bge-small-en-v1.5).
The device caches the label embeddings per label set, so it must see the labels' token ids; they
ride behind each item's text ids:

    ids: [CLS] w1 w2 ... [SEP] | label 1's ids | label 2's ids | ...
    aux: gliner's words_mask   | -1 -1 ...     | -2 -2 ...     | ...

The text part is built as gliner's processor builds it (sie.frontend.gliner, with no prompt words),
and the device returns the same raw span logits as the uni-encoder's, decoded by
`sie.frontend.gliner.decode`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import Tokenizer

from sie.frontend.gliner import (
    NO_TRUNCATION_ABOVE,
    SUBTOKEN_POOLINGS,
    check_word_splitter,
    load_tokenizer,
    split_words,
    unique_labels,
)
from sie.frontend.gliner import words_mask as gliner_words_mask
from sie.frontend.tokenize import Encoded
from sie.model_config import ModelConfigError
from sie.model_location import find_tokenizer_file, folder_tokenizer_file, hf_snapshot, resolve_weights_dir

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

LABELS_TOKENIZER_DIR = "labels_tokenizer"  # where gliner (0.2.2x and later) saves the labels tokenizer


@dataclass(frozen=True, slots=True)
class GlinerBiSettings:
    """The fields of gliner_config.json the inputs and the decoding depend on."""

    labels_encoder: str  # hub id of the labels encoder, whose tokenizer the labels go through
    max_width: int = 12
    max_len: int = 384  # words kept per text; gliner drops the rest
    subtoken_pooling: str = "first"

    @classmethod
    def from_config(cls, raw: Mapping[str, Any], max_len: int | None = None) -> GlinerBiSettings:
        """`max_len`: the profile's `loadtime.max_len` (SIE's override of gliner's), if any."""
        check_architecture(raw)
        settings = cls(
            labels_encoder=str(raw["labels_encoder"]),
            max_width=int(raw.get("max_width", cls.max_width)),
            max_len=int(max_len if max_len is not None else raw.get("max_len", cls.max_len)),
            subtoken_pooling=str(raw.get("subtoken_pooling") or cls.subtoken_pooling),
        )
        if settings.subtoken_pooling not in SUBTOKEN_POOLINGS:
            raise ValueError(f"unknown GLiNER subtoken_pooling {settings.subtoken_pooling!r}")
        return settings


def check_architecture(raw: Mapping[str, Any]) -> None:
    """Only the span-level bi-encoder (gliner's BiEncoderSpanGLiNER) is served by this family."""
    if not raw.get("labels_encoder"):
        raise ValueError("not a GLiNER bi-encoder (no labels_encoder): serve it with the gliner family")
    unsupported = [key for key in ("labels_decoder", "relations_layer") if raw.get(key)]
    if raw.get("span_mode") == "token_level":
        unsupported.append("span_mode: token_level")
    if unsupported:
        raise ValueError(f"GLiNER bi-encoder variant not supported (only span-level models): {unsupported}")
    check_word_splitter(raw)


class GlinerBiInputs:
    """Builds one model's items: text ids with words_mask, then the labels' ids (see the module doc)."""

    def __init__(
        self, text_tokenizer: Tokenizer, labels_tokenizer: Tokenizer, settings: GlinerBiSettings
    ) -> None:
        self.settings = settings
        self._text = text_tokenizer
        self._labels = labels_tokenizer

    @classmethod
    def from_dir(
        cls, weights_dir: Path, dependencies: Mapping[str, str] | None = None, max_len: int | None = None
    ) -> GlinerBiInputs:
        """From a saved bi-encoder folder; the labels tokenizer from its `labels_tokenizer/` or, for
        checkpoints that only name it, the cached repository (`dependencies`: hf_tokenizer_dependencies)."""
        settings = GlinerBiSettings.from_config(_read_json(weights_dir / "gliner_config.json"), max_len)
        labels_dir = labels_tokenizer_dir(weights_dir, settings.labels_encoder, dependencies or {})
        return cls(load_tokenizer(weights_dir), load_labels_tokenizer(labels_dir), settings)

    @classmethod
    def for_model(cls, config: ModelConfig, profile: str | None = None) -> GlinerBiInputs:
        max_len = config.profile(profile).adapter_options.loadtime.get("max_len")
        return cls.from_dir(resolve_weights_dir(config), config.hf_tokenizer_dependencies, max_len)

    def encode(
        self, texts: Sequence[str], labels: Sequence[str]
    ) -> tuple[Encoded, list[list[tuple[int, int]]]]:
        """Each text's ids and aux (text, then labels), and the (start, end) characters of its words.

        Item i's words are those the model sees: the device returns
        `len(words[i]) * max_width * len(unique_labels(labels))` logits for it.
        """
        label_ids = [e.ids for e in self._labels.encode_batch(unique_labels(labels), add_special_tokens=True)]
        label_aux = np.concatenate([np.full(len(ids), -(j + 1), np.int32) for j, ids in enumerate(label_ids)])
        label_flat = np.fromiter((t for ids in label_ids for t in ids), np.int32, len(label_aux))
        words = [split_words(text, self.settings.max_len) for text in texts]
        batch = [[text[start:end] for start, end in spans] for text, spans in zip(texts, words, strict=True)]
        encodings = self._text.encode_batch(batch, is_pretokenized=True, add_special_tokens=True)
        ids, aux, kept = [], [], []
        for encoding, spans in zip(encodings, words, strict=True):
            mask, kept_words = gliner_words_mask(encoding.word_ids, 0, self.settings.subtoken_pooling)
            ids += [np.asarray(encoding.ids, np.int32), label_flat]
            aux += [mask, label_aux]
            kept.append([spans[w] for w in kept_words])
        lengths = np.fromiter((len(e.ids) + len(label_flat) for e in encodings), np.int32, len(encodings))
        offsets = np.zeros(len(encodings) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat_ids = np.concatenate(ids) if ids else np.zeros(0, np.int32)
        flat_aux = np.concatenate(aux) if aux else np.zeros(0, np.int32)
        # SIE meters a bi-encoder's text tokens only: the labels are not the document.
        n_text_tokens = sum(len(e.ids) for e in encodings)
        return Encoded(offsets, flat_ids, None, n_text_tokens, flat_aux), kept


def labels_tokenizer_dir(weights_dir: Path, labels_encoder: str, dependencies: Mapping[str, str]) -> Path:
    """The folder of the labels tokenizer: saved with the model, else the labels encoder's cached
    repository, at the revision the YAML's hf_tokenizer_dependencies pins (or its only entry's)."""
    saved = weights_dir / LABELS_TOKENIZER_DIR
    if find_tokenizer_file(saved) is not None:
        return saved
    repo = labels_encoder
    if repo not in dependencies and len(dependencies) == 1:
        repo = next(iter(dependencies))
    folder = hf_snapshot(repo, dependencies.get(repo))
    if find_tokenizer_file(folder) is None:
        raise ModelConfigError(f"GLiNER bi-encoder: no tokenizer.json for its labels encoder in {folder}")
    return folder


def load_labels_tokenizer(folder: Path) -> Tokenizer:
    """tokenizer.json as gliner's labels tokenizer call uses it: no padding, truncation at
    tokenizer_config.json's model_max_length (gliner gives it no bos/eos override)."""
    tokenizer = Tokenizer.from_file(str(folder_tokenizer_file(folder)))
    tokenizer.no_padding()
    max_length = _read_json(folder / "tokenizer_config.json", missing_ok=True).get("model_max_length")
    if isinstance(max_length, int) and max_length <= NO_TRUNCATION_ABOVE:
        tokenizer.enable_truncation(max_length)
    else:
        tokenizer.no_truncation()
    return tokenizer


def _read_json(path: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    if missing_ok and not path.is_file():
        return {}
    with path.open() as fh:
        raw = json.load(fh)
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return raw
