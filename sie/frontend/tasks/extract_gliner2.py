"""The extract runner of GLiNER2 models: entities, a classification, or a flat structure per text.

Which task a request is follows SIE's GLiNER2 adapter: `params.output_schema` asks for structured
data, `options.classification_task` (or the profile's loadtime one) for classifications, anything
else for entities of `params.labels` (or the profile's `default_labels`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sie.errors import InvalidInput
from sie.frontend import gliner2_structure as structure
from sie.frontend.gliner2 import (
    DEFAULT_THRESHOLD,
    Gliner2Prompts,
    Schema,
    Words,
    check_field_names,
    checked_descriptions,
    checked_threshold,
    entity_schema,
)
from sie.frontend.gliner2_decode import entities, split_values
from sie.frontend.gliner2_windows import Found, picks, pool, ranked, windows
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, submit_extract
from sie.frontend.tasks.extract_gliner2_boundary import run_gliner2_boundary
from sie.gliner2_checkpoint import Gliner2Checkpoint
from sie.model_location import resolve_weights_dir
from sie.shm.layout import ResultKind


@dataclass(frozen=True, slots=True)
class Task:
    """What one request asks of every text: the schema row, the choices before the text, and how the
    schema's values become an item's entities, classifications or data."""

    schema: Schema
    prefix: list[str]
    decode: Callable[[np.ndarray, Words, str], Any]  # one row's values -> its result
    combine: Callable[[list[Any]], dict[str, Any]] = lambda results: dict(results[0])  # a text's rows
    windowed: bool = False  # a text past the word window is read as several rows (classification)

    def rows(self, texts: list[str], max_words: int) -> tuple[list[str], list[int]]:
        """The texts the model reads, and whose each is: one each, or windows of a long text."""
        rows: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            pieces = windows(text, max_words) if self.windowed else [text]
            rows += pieces
            owners += [i] * len(pieces)
        return rows, owners


async def run_gliner2(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    checkpoint = state.tokenizers.built(
        config, "gliner2:checkpoint", lambda: Gliner2Checkpoint.read(resolve_weights_dir(config))
    )
    if checkpoint.architecture == "boundary":
        return await run_gliner2_boundary(state, target, job, checkpoint)
    task = plan(job, target.profile.adapter_options.loadtime)
    admit(state, target, len(job.texts))
    prompts = state.tokenizers.built(config, "gliner2", lambda: Gliner2Prompts.for_model(config))
    rows, owners = task.rows(job.texts, prompts.limits.max_words)
    (encoded, read), tokenization_ms = await tokenize(
        lambda: prompts.encode(rows, [task.schema], task.prefix), len(rows)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    values = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    per_text: list[list[Any]] = [[] for _ in job.texts]
    for r, (words, owner) in enumerate(zip(read, owners, strict=True)):
        scores = split_values(values[r], [task.schema], words.n_read, checkpoint.max_width)[0]
        per_text[owner].append(task.decode(scores, words, job.texts[owner]))
    found = [task.combine(results) for results in per_text]
    return Extracted(
        entities=[f.get("entities", []) for f in found],
        classifications=[f.get("classifications", []) for f in found],
        data=[f.get("data", {}) for f in found],
        input_tokens=submitted.input_tokens,
        tokenization_ms=submitted.tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def plan(job: ExtractJob, loadtime: dict[str, Any]) -> Task:
    """The request's task, its options checked as SIE's adapter checks them."""
    options = job.options
    threshold = checked_threshold(options.get("threshold", loadtime.get("threshold", DEFAULT_THRESHOLD)))
    task = options.get("classification_task", loadtime.get("classification_task"))
    multi_label = options.get("multi_label", loadtime.get("multi_label", False))
    if not isinstance(multi_label, bool):
        raise InvalidInput("GLiNER2 multi_label must be boolean")
    if job.output_schema is not None:
        if job.labels:
            raise InvalidInput("GLiNER2 structured extraction does not accept labels")
        if task is not None:
            raise InvalidInput("GLiNER2 structured extraction does not accept classification_task")
        return structure_task(job.output_schema, threshold)
    if any(item.metadata and "entities" in item.metadata for item in job.items):
        raise InvalidInput("GLiNER2 relation extraction (items' metadata.entities) is not served here")
    labels = checked_labels(job.labels if job.labels is not None else loadtime.get("default_labels"))
    if task is None:
        check_field_names(labels, "labels")
        descriptions = checked_descriptions(options.get("entity_descriptions", {}), labels)
        return Task(
            entity_schema(labels, descriptions),
            [],
            lambda scores, words, text: {"entities": entities(scores, labels, words, text, threshold)},
        )
    if not isinstance(task, str) or not task.strip():
        raise InvalidInput("GLiNER2 classification_task must be a non-empty string")
    check_field_names([task, *labels], "classification_task and labels")
    positive = positive_label_of(options, loadtime, labels)

    def combine(found: list[Found]) -> dict[str, Any]:
        one = (
            found[0]
            if len(found) == 1
            else pool(found, n_labels=len(labels), multi_label=multi_label, positive_label=positive)
        )
        return {"classifications": ranked(one, threshold)}

    return Task(
        Schema("classification", task, tuple(labels)),
        [],
        lambda logits, _words, _text: picks(logits, labels, multi_label=multi_label, threshold=threshold),
        combine,
        windowed=True,
    )


def structure_task(output_schema: dict[str, Any], threshold: float) -> Task:
    fields = structure.parse_output_schema(output_schema)
    order = [f.name for f in fields]
    schema, prefix = structure.prompt(fields, order)
    return Task(
        schema,
        prefix,
        lambda scores, words, _text: {"data": structure.decode(scores, fields, order, words, threshold)},
    )


def checked_labels(labels: Any) -> list[str]:
    """SIE's rules: a non-empty list of non-empty, distinct (after stripping) strings."""
    if labels is None or (isinstance(labels, list) and not labels):
        raise InvalidInput("GLiNER2 requires labels parameter for extraction")
    if not isinstance(labels, list) or any(
        not isinstance(label, str) or not label.strip() for label in labels
    ):
        raise InvalidInput("GLiNER2 labels must be non-empty strings")
    stripped = [label.strip() for label in labels]
    if len(set(stripped)) != len(stripped):
        raise InvalidInput("GLiNER2 labels must be unique")
    return stripped


def positive_label_of(options: dict[str, Any], loadtime: dict[str, Any], labels: list[str]) -> str | None:
    """The label a windowed text takes when any window takes it: the request's (checked as SIE
    checks it), else the profile's when the labels hold it."""
    if "positive_label" not in options or options["positive_label"] is None:
        configured = loadtime.get("positive_label")
        return configured if configured in labels else None
    value = options["positive_label"]
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("GLiNER2 positive_label must be a non-empty string")
    if value.strip() not in labels:
        raise InvalidInput("GLiNER2 positive_label must be one of the labels")
    return value.strip()
