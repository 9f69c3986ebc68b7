"""Extract runners of the text families: taggers, GLiNER, NLI zero-shot and GLiClass.

- token_classification: a tagger's per-token logits, merged into character spans here;
- gliner: zero-shot spans for the request's labels (prompt built here, spans decoded here), and
  for joint entity-relation models the relations between them (tasks/extract_gliner_relex.py);
- nli_zero_shot: each (text, "This example is {label}.") pair through an NLI cross-encoder;
- gliclass: zero-shot classes for the request's labels, all scored in one forward per text;
- context_pruner: each text as the passage of a (query, passage) pair, the query being the
  request's instruction: kept, highlighted and pruned spans after a summary with the relevance.
"""

from __future__ import annotations

from sie.context_pruner import DEFAULT_HIGHLIGHT_THRESHOLD, DEFAULT_PRUNE_THRESHOLD
from sie.errors import InvalidInput
from sie.frontend.context_pruner import keep_spans, skipped_token_ids, summary
from sie.frontend.entities import DEFAULT_IGNORE_LABELS, aggregate_simple, id2label_of
from sie.frontend.gliclass import (
    GliclassPrompts,
    checked_instruction,
    checked_labels,
    is_multi_label,
    ranked_classes,
)
from sie.frontend.gliner import GlinerPrompts, decode, merge_adjacent
from sie.frontend.pipeline import admit, submit, tokenize
from sie.frontend.scoring import activate
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, extracted_from, submit_extract, threshold_option
from sie.frontend.tasks.extract_gliner_relex import run_gliner_relex
from sie.frontend.zero_shot import classify, entailment_index, nli_pairs
from sie.model_location import resolve_weights_dir
from sie.shm.layout import Op, ResultKind

DEFAULT_GLINER_THRESHOLD = 0.5


async def run_token_classification(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    admit(state, target, len(job.texts))
    tokenizer = state.tokenizers.get(config)
    (encoded, offsets), tokenization_ms = await tokenize(
        lambda: tokenizer.encode_with_offsets(job.texts), len(job.texts)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    id2label = state.tokenizers.built(config, "id2label", lambda: id2label_of(resolve_weights_dir(config)))
    runtime = target.runtime
    ignore = set(runtime.ignore_labels or DEFAULT_IGNORE_LABELS)
    # A tagger has no threshold of its own (transformers' pipeline keeps every span); one applies
    # only when the request or the model config asks.
    threshold = threshold_option(job.options, runtime.threshold, default=0.0)
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
    return extracted_from(submitted, entities=entities)


async def run_gliner(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = job.labels or []
    runtime = target.runtime
    threshold = threshold_option(job.options, runtime.threshold, default=DEFAULT_GLINER_THRESHOLD)
    merge = job.options.get("merge_adjacent_entities", runtime.merge_adjacent_entities)
    if not isinstance(merge, bool):
        raise InvalidInput("options.merge_adjacent_entities must be a boolean")
    admit(state, target, len(job.texts))
    prompts = state.tokenizers.derived(config, "gliner", lambda tok: GlinerPrompts.for_model(tok, config))
    if prompts.settings.rel_token is not None:  # a joint entity-relation model
        return await run_gliner_relex(state, target, job, prompts, threshold, merge)
    if job.options.get("relation_labels"):
        raise InvalidInput(
            "This GLiNER model does not extract relations; options.relation_labels needs a joint "
            "entity-relation model such as knowledgator/gliner-relex-large-v1.0"
        )
    (encoded, words), tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, labels), len(job.texts)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    scores = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    entities = [
        decode(scores[i], len(words[i]), labels, words[i], text, threshold)
        for i, text in enumerate(job.texts)
    ]
    if merge:
        entities = [merge_adjacent(found, text) for found, text in zip(entities, job.texts, strict=True)]
    return extracted_from(submitted, entities=entities)


async def run_nli_zero_shot(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = job.labels or []
    runtime = target.runtime
    multi_label = job.options.get("multi_label", runtime.multi_label)
    if not isinstance(multi_label, bool):
        raise InvalidInput("options.multi_label must be a boolean")
    template = job.options.get("hypothesis_template", runtime.hypothesis_template)
    if not isinstance(template, str):
        raise InvalidInput("options.hypothesis_template must be a string")
    premises, hypotheses = nli_pairs(job.texts, labels, template)
    admit(state, target, len(premises))
    tokenizer = state.tokenizers.get(config)
    encoded, tokenization_ms = await tokenize(
        lambda: tokenizer.encode_pairs(premises, hypotheses), len(premises)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.SCORES)
    entail, contradiction = state.tokenizers.built(
        config,
        f"entailment:{runtime.entailment_label}",
        lambda: entailment_index(resolve_weights_dir(config), runtime.entailment_label),
    )
    logits = submitted.results.rows[ResultKind.SCORES]
    classifications = classify(logits, len(labels), labels, entail, contradiction, multi_label)
    return extracted_from(submitted, classifications=classifications, n_items=len(job.texts))


async def run_gliclass(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = checked_labels(job.labels or [])
    instruction = checked_instruction(job.instruction)
    runtime = target.runtime
    multi_label = is_multi_label(job.options, runtime.multi_label)
    # SIE's default: every label with its score; a threshold above 0 drops those below it.
    threshold = threshold_option(job.options, runtime.threshold, default=0.0)
    admit(state, target, len(job.texts))
    prompts = state.tokenizers.derived(config, "gliclass", lambda tok: GliclassPrompts.for_model(config, tok))
    encoded, tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, labels, instruction), len(job.texts)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    logits = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    classifications = [
        ranked_classes(scores, labels, multi_label=multi_label, threshold=threshold) for scores in logits
    ]
    return extracted_from(submitted, classifications=classifications)


async def run_context_pruner(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config, runtime = target.config, target.runtime
    prune_threshold = threshold_option(
        job.options, runtime.prune_threshold, default=DEFAULT_PRUNE_THRESHOLD, name="prune_threshold"
    )
    highlight_threshold = threshold_option(
        job.options,
        runtime.highlight_threshold,
        default=DEFAULT_HIGHLIGHT_THRESHOLD,
        name="highlight_threshold",
    )
    query = job.instruction or ""  # SIE's: the instruction is the query the passages are pruned for
    admit(state, target, len(job.texts))
    tokenizer = state.tokenizers.get(config)
    (encoded, spans), tokenization_ms = await tokenize(
        lambda: tokenizer.encode_pairs_with_spans([query] * len(job.texts), job.texts), len(job.texts)
    )
    submitted = await submit(
        state,
        target,
        encoded,
        op=Op.EXTRACT,
        kinds={ResultKind.SCORES, ResultKind.TOKEN_SCORES},
        tokenization_ms=tokenization_ms,
    )
    skipped = state.tokenizers.derived(
        config, "pruner_skipped_ids", lambda tok: skipped_token_ids(resolve_weights_dir(config), tok.raw)
    )
    relevance = activate(submitted.results.rows[ResultKind.SCORES][:, :1], "sigmoid")[:, 0]
    keep_logits = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    entities = []
    for i, text in enumerate(job.texts):
        ids = encoded.input_ids[encoded.offsets[i] : encoded.offsets[i + 1]]
        keep = activate(keep_logits[i][:, 0], "sigmoid")
        found = keep_spans(text, spans[i], ids, keep, skipped, prune_threshold, highlight_threshold)
        entities.append([summary(float(relevance[i]), found), *found])
    return extracted_from(submitted, entities=entities)
