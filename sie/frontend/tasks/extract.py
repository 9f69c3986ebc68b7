"""The extract task: entities and classifications from text, whatever family the model is.

- token_classification: a tagger's per-token logits, merged into character spans here;
- gliner: zero-shot spans for the request's labels (prompt built here, spans decoded here), and
  for joint entity-relation models the relations between them (tasks/extract_gliner_relex.py);
- nli_zero_shot: each (text, "This example is {label}.") pair through an NLI cross-encoder;
- gliclass: zero-shot classes for the request's labels, all scored in one forward per text.
Images (owlv2) and audio (whisper) have their runners in `detect` and `transcribe`; each family's
spec in sie.families names its runner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sie.errors import InvalidInput
from sie.families import family_of
from sie.frontend.entities import DEFAULT_IGNORE_LABELS, aggregate_simple, id2label_of
from sie.frontend.gliclass import (
    GliclassPrompts,
    checked_instruction,
    checked_labels,
    is_multi_label,
    ranked_classes,
)
from sie.frontend.gliner import GlinerPrompts, decode, merge_adjacent
from sie.frontend.pipeline import Submitted, admit, lora_config_key, submit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.wire import Item
from sie.frontend.zero_shot import classify, entailment_index, nli_pairs
from sie.model_config import ModelConfig, resolve_weights_dir
from sie.shm.layout import Op, ResultKind

DEFAULT_GLINER_THRESHOLD = 0.5
MAX_EXTRACT_LABELS = 1000  # SIE's cap: zero-shot work grows with every label


@dataclass(frozen=True, slots=True)
class ExtractJob:
    texts: list[str]
    labels: list[str] | None
    options: dict[str, Any]
    profile: str | None = None
    items: Sequence[Item] = ()  # the request's items, for the families that read images or audio
    lora: str | None = None  # a LoRA adapter from the model's `loras` (checked by the route)
    instruction: str | None = None  # the request's task description (gliclass reads it)
    output_schema: dict[str, Any] | None = None  # params.output_schema (gliner2 reads it)


@dataclass(slots=True)
class Extracted:
    """Per item: entities and classifications; objects (detection) and data (transcripts) when a
    family fills them, else those response keys stay empty."""

    entities: list[list[dict[str, Any]]]
    classifications: list[list[dict[str, Any]]]
    objects: list[list[dict[str, Any]]] | None = None
    data: list[dict[str, Any]] | None = None
    relations: list[list[dict[str, Any]]] | None = None  # gliner relex: head, tail, relation, score
    input_tokens: int = 0
    tokenization_ms: float = 0.0
    queue_ms: float = 0.0
    inference_ms: float = 0.0


# What a family's `extract_runner` names (sie.families).
ExtractRunner = Callable[[FrontendState, str, ModelConfig, ExtractJob], Awaitable[Extracted]]


def check_extraction(config: ModelConfig, name: str, labels: list[str] | None) -> None:
    if not config.supports_extract():
        raise InvalidInput(f"Model '{name}' does not support extraction")
    if family_of(config.family).extract_needs_labels and not labels:
        raise InvalidInput(f"Model '{name}' is a zero-shot model: params.labels must list at least one label")
    if labels and any(not label.strip() for label in labels):
        raise InvalidInput("params.labels must not contain empty labels")
    if labels and len(labels) > MAX_EXTRACT_LABELS:
        raise InvalidInput(f"Field 'labels' must contain at most {MAX_EXTRACT_LABELS} labels")


async def extract(state: FrontendState, name: str, job: ExtractJob) -> Extracted:
    _, config = state.model(name)
    check_extraction(config, name, job.labels)
    # Resolved on first use: detect and transcribe import this module's types.
    run: ExtractRunner = family_of(config.family).extract_function()
    return await run(state, name, config, job)


async def run_token_classification(
    state: FrontendState, name: str, config: ModelConfig, job: ExtractJob
) -> Extracted:
    slot, _ = admit(state, name, len(job.texts), job.profile)
    tokenizer = state.tokenizers.get(config)
    (encoded, offsets), tokenization_ms = await tokenize(
        lambda: tokenizer.encode_with_offsets(job.texts), len(job.texts)
    )
    submitted = await _submit(state, slot, config, job, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    id2label = state.tokenizers.derived(
        config, "id2label", lambda _: id2label_of(resolve_weights_dir(config))
    )
    runtime = config.profile(job.profile).adapter_options.runtime
    ignore = set(runtime.ignore_labels or DEFAULT_IGNORE_LABELS)
    # A tagger has no threshold of its own (transformers' pipeline keeps every span); one applies
    # only when the request or the model config asks.
    threshold = _threshold(job.options, runtime.threshold, default=0.0)
    logits = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    entities = [
        [
            entity
            for entity in aggregate_simple(
                logits[i], offsets[i], text, id2label, ignore, join_touching=runtime.join_touching
            )
            if entity["score"] >= threshold
        ]
        for i, text in enumerate(job.texts)
    ]
    return _extracted(submitted, entities=entities)


async def run_gliner(state: FrontendState, name: str, config: ModelConfig, job: ExtractJob) -> Extracted:
    labels = job.labels or []
    runtime = config.profile(job.profile).adapter_options.runtime
    threshold = _threshold(job.options, runtime.threshold, default=DEFAULT_GLINER_THRESHOLD)
    merge = job.options.get("merge_adjacent_entities", runtime.merge_adjacent_entities)
    if not isinstance(merge, bool):
        raise InvalidInput("options.merge_adjacent_entities must be a boolean")
    slot, _ = admit(state, name, len(job.texts), job.profile)
    prompts = state.tokenizers.derived(config, "gliner", lambda tok: GlinerPrompts.for_model(tok, config))
    if prompts.settings.rel_token is not None:  # a joint entity-relation model
        from sie.frontend.tasks.extract_gliner_relex import run_gliner_relex  # imports this module

        return await run_gliner_relex(state, slot, config, job, prompts, threshold, merge)
    if job.options.get("relation_labels"):
        raise InvalidInput(
            "This GLiNER model does not extract relations; options.relation_labels needs a joint "
            "entity-relation model such as knowledgator/gliner-relex-large-v1.0"
        )
    (encoded, words), tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, labels), len(job.texts)
    )
    submitted = await _submit(state, slot, config, job, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    scores = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    entities = [
        decode(scores[i], len(words[i]), labels, words[i], text, threshold)
        for i, text in enumerate(job.texts)
    ]
    if merge:
        entities = [merge_adjacent(found, text) for found, text in zip(entities, job.texts, strict=True)]
    return _extracted(submitted, entities=entities)


async def run_nli_zero_shot(
    state: FrontendState, name: str, config: ModelConfig, job: ExtractJob
) -> Extracted:
    labels = job.labels or []
    runtime = config.profile(job.profile).adapter_options.runtime
    multi_label = job.options.get("multi_label", runtime.multi_label)
    if not isinstance(multi_label, bool):
        raise InvalidInput("options.multi_label must be a boolean")
    template = job.options.get("hypothesis_template", runtime.hypothesis_template)
    if not isinstance(template, str):
        raise InvalidInput("options.hypothesis_template must be a string")
    premises, hypotheses = nli_pairs(job.texts, labels, template)
    slot, _ = admit(state, name, len(premises), job.profile)
    tokenizer = state.tokenizers.get(config)
    encoded, tokenization_ms = await tokenize(
        lambda: tokenizer.encode_pairs(premises, hypotheses), len(premises)
    )
    submitted = await _submit(state, slot, config, job, encoded, tokenization_ms, ResultKind.SCORES)
    entail, contradiction = state.tokenizers.derived(
        config,
        f"entailment:{runtime.entailment_label}",
        lambda _: entailment_index(resolve_weights_dir(config), runtime.entailment_label),
    )
    logits = submitted.results.rows[ResultKind.SCORES]
    classifications = classify(logits, len(labels), labels, entail, contradiction, multi_label)
    return _extracted(submitted, classifications=classifications, n_items=len(job.texts))


async def run_gliclass(state: FrontendState, name: str, config: ModelConfig, job: ExtractJob) -> Extracted:
    labels = checked_labels(job.labels or [])
    instruction = checked_instruction(job.instruction)
    runtime = config.profile(job.profile).adapter_options.runtime
    multi_label = is_multi_label(job.options, runtime.multi_label)
    # SIE's default: every label with its score; a threshold above 0 drops those below it.
    threshold = _threshold(job.options, runtime.threshold, default=0.0)
    slot, _ = admit(state, name, len(job.texts), job.profile)
    prompts = state.tokenizers.derived(config, "gliclass", lambda tok: GliclassPrompts.for_model(config, tok))
    encoded, tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, labels, instruction), len(job.texts)
    )
    submitted = await _submit(state, slot, config, job, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    logits = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    classifications = [
        ranked_classes(scores, labels, multi_label=multi_label, threshold=threshold) for scores in logits
    ]
    return _extracted(submitted, classifications=classifications)


async def _submit(
    state: FrontendState,
    slot: int,
    config: ModelConfig,
    job: ExtractJob,
    encoded: Any,
    tokenization_ms: float,
    kind: ResultKind,
) -> Submitted:
    return await submit(
        state,
        slot,
        encoded,
        op=Op.EXTRACT,
        kinds={kind},
        key=lora_config_key(config, job.profile or config.default_profile_name, job.lora),
        tokenization_ms=tokenization_ms,
    )


def _extracted(
    submitted: Submitted,
    *,
    entities: list[list[dict[str, Any]]] | None = None,
    classifications: list[list[dict[str, Any]]] | None = None,
    n_items: int | None = None,
) -> Extracted:
    n = n_items if n_items is not None else len(entities or classifications or [])
    return Extracted(
        entities=entities if entities is not None else [[] for _ in range(n)],
        classifications=classifications if classifications is not None else [[] for _ in range(n)],
        input_tokens=submitted.input_tokens,
        tokenization_ms=submitted.tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def _threshold(options: dict[str, Any], configured: float | None, *, default: float) -> float:
    value = options.get("threshold", configured if configured is not None else default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidInput("options.threshold must be a number between 0 and 1")
    return float(value)
