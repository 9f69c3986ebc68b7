"""The privacy_filter extract runner: each text's tokens to the device in windows, its label
log-probabilities decoded into spans here (sie.frontend.privacy_filter)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InputTooLong, InvalidInput
from sie.frontend.entities import id2label_of
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.privacy_filter import (
    DEFAULT_WINDOW_TOKENS,
    MAX_SPAN_ENTRY_BIAS,
    LabelSpace,
    Transitions,
    Window,
    calibration_biases,
    context_margin,
    entities,
    log_softmax,
    plan_windows,
    stitch,
    transitions,
    viterbi,
)
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, extracted_from, submit_extract
from sie.frontend.tokenize import Encoded
from sie.model_config import ModelConfig
from sie.model_location import resolve_tokenizer_file, resolve_weights_dir
from sie.shm.layout import ResultKind

DEFAULT_MAX_TOKENS = 128_000  # the checkpoint's context, and SIE's limit for one text
INLINE_DECODE_TOKENS = 2048


@dataclass(frozen=True, slots=True)
class PrivacyFilter:
    """What the frontend needs of one checkpoint, read once from its folder."""

    tokenizer: Tokenizer  # no truncation: a text is read whole, in windows
    space: LabelSpace
    biases: dict[str, float]
    margin: int
    window: int
    max_tokens: int
    trim_whitespace: bool

    @classmethod
    def load(cls, config: ModelConfig) -> PrivacyFilter:
        folder = resolve_weights_dir(config)
        loadtime = config.profile().adapter_options.loadtime
        tokenizer = Tokenizer.from_file(str(resolve_tokenizer_file(config)))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        margin = context_margin(folder)
        window = int(loadtime.get("window_tokens", max(DEFAULT_WINDOW_TOKENS, 4 * margin)))
        plan_windows(window + 1, window, margin)  # a window too small for its context fails the load here
        return cls(
            tokenizer=tokenizer,
            space=LabelSpace.from_id2label(id2label_of(folder)),
            biases=calibration_biases(folder, str(loadtime.get("checkpoint_subdir", "original"))),
            margin=margin,
            window=window,
            max_tokens=config.max_sequence_length or DEFAULT_MAX_TOKENS,
            trim_whitespace=bool(loadtime.get("trim_span_whitespace", True)),
        )

    def categories(self, labels: list[str] | None) -> set[str] | None:
        """The request's labels, each one of the model's categories; None (no labels): all of them."""
        if not labels:
            return None
        known = self.space.category_names
        unknown = [label for label in labels if label not in known]
        if unknown:
            raise InvalidInput(
                f"params.labels {unknown} are not categories of this model; it finds {', '.join(known)}"
            )
        return set(labels)


async def run_privacy_filter(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    if job.instruction is not None or job.output_schema is not None:
        raise InvalidInput(
            "This model finds its trained privacy categories: it takes no instruction or output_schema"
        )
    admit(state, target, len(job.texts))
    # Built once, off the event loop: the model's tokenizer is large (o200k: 200,000 tokens).
    model = await asyncio.to_thread(
        state.tokenizers.built, target.config, "privacy_filter", lambda: PrivacyFilter.load(target.config)
    )
    wanted = model.categories(job.labels)
    biases = dict(model.biases)
    biases["transition_bias_background_to_start"] += span_entry_bias(job.options)
    table = transitions(model.space, biases)
    encodings, tokenization_ms = await tokenize(
        lambda: model.tokenizer.encode_batch(job.texts, add_special_tokens=False), len(job.texts)
    )
    for i, encoding in enumerate(encodings):
        if len(encoding.ids) > model.max_tokens:
            raise InputTooLong(
                f"Item {i} has {len(encoding.ids)} tokens; this model reads at most {model.max_tokens}"
            )
    plans = [plan_windows(len(encoding.ids), model.window, model.margin) for encoding in encodings]
    batch = _windows_batch(encodings, plans)
    if batch.n_tokens == 0:  # only empty texts: nothing to run
        return Extracted(entities=[[] for _ in job.texts], classifications=[[] for _ in job.texts])
    admit(state, target, len(batch.offsets) - 1)  # a long text's windows are items of their own
    submitted = await submit_extract(state, target, batch, tokenization_ms, ResultKind.TOKEN_SCORES)
    outputs = submitted.results.ragged[ResultKind.TOKEN_SCORES]

    def decode() -> list[list[dict[str, Any]]]:
        return _decoded(model, job.texts, encodings, plans, outputs, table, wanted)

    # Viterbi costs about 15 µs a token: a long request's decoding leaves the event loop free.
    found = await asyncio.to_thread(decode) if batch.n_tokens > INLINE_DECODE_TOKENS else decode()
    return extracted_from(submitted, entities=found)


def _decoded(
    model: PrivacyFilter,
    texts: list[str],
    encodings: list[Any],
    plans: list[list[Window]],
    outputs: list[np.ndarray],
    table: Transitions,
    wanted: set[str] | None,
) -> list[list[dict[str, Any]]]:
    """Each text's entities from its windows' logits, in the order the windows were sent."""
    rows = iter(outputs)
    found = []
    for text, encoding, windows in zip(texts, encodings, plans, strict=True):
        if not windows:
            found.append([])
            continue
        logprobs = log_softmax(stitch(windows, [next(rows) for _ in windows]))
        path = viterbi(logprobs, table)
        offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        trim = model.trim_whitespace
        found.append(
            entities(text, offsets, logprobs, path, model.space, trim_whitespace=trim, wanted=wanted)
        )
    return found


def span_entry_bias(options: dict[str, Any]) -> float:
    """`options.span_entry_bias`: added to the calibrated background-to-span bias (-10 to 10)."""
    value = options.get("span_entry_bias", 0.0)
    # Compared, not converted: NaN compares false, and a JSON integer may be too large for a float.
    if isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) <= MAX_SPAN_ENTRY_BIAS:
        raise InvalidInput("options.span_entry_bias must be a number between -10 and 10")
    return float(value)


def _windows_batch(encodings: list[Any], plans: list[list[Window]]) -> Encoded:
    """Every text's windows as the batch's items, in order."""
    return Encoded.from_rows(
        [
            encoding.ids[w.start : w.stop]
            for encoding, windows in zip(encodings, plans, strict=True)
            for w in windows
        ]
    )
