"""GLiClass zero-shot classification, frontend half: the prompt going in, the label scores coming out.

A GLiClass uni-encoder reads the labels and the text as one sequence, which this module builds as
the `gliclass` package's ZeroShotClassificationPipeline does: `<<LABEL>>label1<<LABEL>>label2<<SEP>>`
and then the request's instruction (the pipeline's `prompt`), before the text when the model's
config.json says `prompt_first`, else after it; tokenized with the special tokens and cut at the
pipeline's max length. The device returns one logit per label, found by the `<<LABEL>>` tokens;
the scores are the pipeline's: a softmax across the labels (single-label) or a sigmoid each
(multi-label). Every label is listed, best first, as SIE lists them.

Where this differs from the pipeline, on purpose (SIE's adapter does the same):
- a single-label request with one label gets that label's sigmoid: a softmax over one label is 1.0;
- labels are stripped of surrounding whitespace and must be unique.
And where SIE would fail the item: a text-first model's long text is cut to the room the labels
leave, where the pipeline's truncation would cut labels off and score the wrong slots.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.tokenize import Encoded, TextTokenizer
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir

if TYPE_CHECKING:
    from sie.model_config import ModelConfig

LABEL_MARKER = "<<LABEL>>"
SEP_MARKER = "<<SEP>>"
MARKERS = (LABEL_MARKER, SEP_MARKER, "<<EXAMPLE>>")  # the pipeline's fixed marker strings
PIPELINE_MAX_LENGTH = 1024  # ZeroShotClassificationPipeline's default max_length
MAX_INSTRUCTION_CHARS = 2048  # SIE's cap: the instruction is fused into every item
# Label text averages far fewer characters per token, so a longer prompt cannot fit the window
# and is refused before anything tokenizes it.
MAX_PROMPT_CHARS_PER_TOKEN = 16
# SIE's request options that change what is computed and are not served here.
UNSERVED_OPTIONS = ("label_groups", "examples")


@dataclass(frozen=True, slots=True)
class GliclassLayout:
    """The fields of a GLiClass config.json the prompt depends on."""

    prompt_first: bool
    class_token_id: int

    @classmethod
    def from_config(cls, raw: dict[str, Any]) -> GliclassLayout:
        architecture = raw.get("architecture_type", "uni-encoder")
        if architecture != "uni-encoder":
            raise ValueError(f"GLiClass architecture {architecture!r} not supported (only uni-encoder)")
        index = int(raw.get("class_token_index", -1))
        if index == -1:  # gliclass's default: the first id past the encoder's vocabulary
            index = int(raw.get("vocab_size") or raw["encoder_config"]["vocab_size"])
        return cls(bool(raw.get("prompt_first", False)), index)


class GliclassPrompts:
    """Builds one model's inputs: the labels, the instruction and each text as one token sequence."""

    def __init__(self, tokenizer: TextTokenizer, layout: GliclassLayout) -> None:
        self.layout = layout
        self._tokenizer = tokenizer
        raw = tokenizer.raw
        if raw.token_to_id(LABEL_MARKER) != layout.class_token_id:
            raise ValueError(
                f"tokenizer's {LABEL_MARKER!r} is not the model's class_token_index {layout.class_token_id}"
            )
        self.max_length = tokenizer.max_length
        # The special tokens around a text, split where the text goes (e.g. [CLS] | [SEP]).
        specials = raw.encode("").ids
        self._n_lead = raw.encode("a").special_tokens_mask.index(0)
        self._lead, self._trail = specials[: self._n_lead], specials[self._n_lead :]

    @classmethod
    def for_model(cls, config: ModelConfig, shared: TextTokenizer | None = None) -> GliclassPrompts:
        """A configured model's prompts: its config.json, and its tokenizer cut at the YAML's
        max_sequence_length (the window SIE gives the pipeline), else the pipeline's default;
        the `shared` tokenizer when it cuts there."""
        with (resolve_weights_dir(config) / "config.json").open() as fh:
            layout = GliclassLayout.from_config(json.load(fh))
        max_length = config.max_sequence_length or PIPELINE_MAX_LENGTH
        if shared is None or shared.max_length != max_length:
            shared = TextTokenizer(resolve_tokenizer_file(config), max_length)
        return cls(shared, layout)

    def encode(self, texts: Sequence[str], labels: Sequence[str], instruction: str | None = None) -> Encoded:
        """Token ids per text, each holding one `<<LABEL>>` per label (`labels` already checked)."""
        prompt = label_prompt(labels, instruction)
        prompt_ids = self._prompt_ids(prompt)
        for i, text in enumerate(texts):
            if any(marker in text for marker in MARKERS):
                raise InvalidInput(f"Item {i}'s text must not contain GLiClass's marker tokens {MARKERS}")
        fused = [prompt + text if self.layout.prompt_first else text + prompt for text in texts]
        encoded = self._tokenizer.encode(fused)
        is_marker = (encoded.input_ids == self.layout.class_token_id).astype(np.int32)
        counts = np.add.reduceat(is_marker, encoded.offsets[:-1]) if len(texts) else is_marker
        if counts.max(initial=0) > len(labels):  # a marker the normalizer made, the model would read
            raise InvalidInput(f"Item {int(counts.argmax())}'s text reads as GLiClass's label marker")
        cut = np.flatnonzero(counts < len(labels)).tolist()
        if cut and self.layout.prompt_first:
            raise InvalidInput("the labels do not fit in the model's maximum input length")
        if not cut:  # token types stay 0: the pipeline's are all 0 for its single sequences
            return Encoded(encoded.offsets, encoded.input_ids, None, encoded.n_tokens)
        ids = np.split(encoded.input_ids, encoded.offsets[1:-1])
        for i, row in zip(cut, self._with_text_cut([texts[i] for i in cut], prompt_ids), strict=True):
            ids[i] = row
        return _flatten(ids)

    def _prompt_ids(self, prompt: str) -> np.ndarray:
        """The prompt's tokens alone; refused when it leaves the text no room in the window."""
        room = self.max_length - len(self._lead) - len(self._trail)
        too_long = len(prompt) > MAX_PROMPT_CHARS_PER_TOKEN * room
        ids = [] if too_long else self._tokenizer.raw.encode(prompt, add_special_tokens=False).ids
        if too_long or len(ids) >= room:
            raise InvalidInput(
                "the labels and instruction leave no room for the text in the model's "
                f"{self.max_length}-token maximum input length: send fewer or shorter labels"
            )
        return np.asarray(ids, np.int32)

    def _with_text_cut(self, texts: list[str], prompt_ids: np.ndarray) -> list[np.ndarray]:
        """Text-first sequences whose text is cut to the tokens that leave room for every label."""
        room = self.max_length - len(self._lead) - len(self._trail) - len(prompt_ids)
        encoded = self._tokenizer.encode(texts)
        rows = []
        for i in range(len(texts)):
            start = int(encoded.offsets[i]) + self._n_lead
            end = min(start + room, int(encoded.offsets[i + 1]) - len(self._trail))
            text_ids = encoded.input_ids[start:end]
            rows.append(np.concatenate([self._lead, text_ids, prompt_ids, self._trail]).astype(np.int32))
        return rows


def label_prompt(labels: Sequence[str], instruction: str | None) -> str:
    """The pipeline's label part: each label after a `<<LABEL>>`, then `<<SEP>>` and the instruction."""
    return "".join(LABEL_MARKER + label for label in labels) + SEP_MARKER + (instruction or "")


def checked_labels(labels: Sequence[str]) -> list[str]:
    """SIE's labels: stripped, unique, and free of the marker strings."""
    stripped = [label.strip() for label in labels]
    if any(not label for label in stripped):
        raise InvalidInput("GLiClass labels must be non-empty strings")
    if len(set(stripped)) != len(stripped):
        raise InvalidInput("GLiClass labels must be unique")
    if any(marker in label for label in stripped for marker in MARKERS):
        raise InvalidInput(f"labels must not contain GLiClass's marker tokens {MARKERS}")
    return stripped


def checked_instruction(instruction: str | None) -> str | None:
    """The request's instruction as the pipeline's prompt; blank is none (as in SIE)."""
    if instruction is None or not instruction.strip():
        return None
    if len(instruction) > MAX_INSTRUCTION_CHARS:
        raise InvalidInput(f"GLiClass instruction must be at most {MAX_INSTRUCTION_CHARS} characters")
    return instruction


def is_multi_label(options: dict[str, Any], default: bool) -> bool:
    """`options.classification_type` ("single-label" or "multi-label"), else the profile's default.
    SIE's options that would change what is scored and are not served here are refused."""
    for name in UNSERVED_OPTIONS:
        if options.get(name) is not None:
            raise InvalidInput(f"options.{name} is not supported for GLiClass models here")
    value = options.get("classification_type")
    if value is None:
        return default
    if value not in ("single-label", "multi-label"):
        raise InvalidInput("options.classification_type must be 'single-label' or 'multi-label'")
    return bool(value == "multi-label")


def ranked_classes(
    logits: np.ndarray, labels: Sequence[str], *, multi_label: bool, threshold: float
) -> list[dict[str, Any]]:
    """One text's classifications from its label logits: every label at or above `threshold` (all of
    them at 0), best first; ties keep the labels' order."""
    z = np.asarray(logits, np.float64).reshape(-1)
    if len(z) != len(labels):
        raise ValueError(f"{len(z)} logits for {len(labels)} labels")
    if multi_label or len(z) == 1:
        scores = np.exp(-np.logaddexp(0.0, -z))  # the sigmoid, without overflow for large -z
    else:
        e = np.exp(z - z.max())
        scores = e / e.sum()
    order = np.argsort(-scores, kind="stable")
    found = [{"label": labels[i], "score": float(scores[i])} for i in order.tolist()]
    return [c for c in found if c["score"] >= threshold] if threshold > 0.0 else found


def _flatten(rows: list[np.ndarray]) -> Encoded:
    lengths = np.fromiter((len(row) for row in rows), np.int32, len(rows))
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    input_ids = np.concatenate(rows).astype(np.int32) if rows else np.zeros(0, np.int32)
    return Encoded(offsets, input_ids, None, int(offsets[-1]))
