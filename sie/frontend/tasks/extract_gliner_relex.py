"""The extract runner of GLiNER joint entity-relation ("relex") models: entities, and with
`options.relation_labels` the relations between them.

Options follow SIE's GLiNER adapter: `threshold` (entities; at least 0.1 for these models),
`relation_labels` (relation types; none gives entities only), `relation_threshold` (else the
profile's `runtime.relation_threshold`, else `threshold`) and `merge_adjacent_entities`. Relations
name the entities as found, before any merge. See sie/frontend/gliner_relex.py for the decoding.
"""

from __future__ import annotations

from sie.frontend.gliner import GlinerPrompts, merge_adjacent, unique_labels
from sie.frontend.gliner_relex import decode_item, relex_options
from sie.frontend.pipeline import tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key, lora_index
from sie.frontend.tasks.extract import MAX_EXTRACT_LABELS, Extracted, ExtractJob, submit_extract
from sie.shm.layout import ResultKind, with_lora


async def run_gliner_relex(
    state: FrontendState,
    target: Target,
    job: ExtractJob,
    prompts: GlinerPrompts,
    threshold: float,
    merge: bool,
) -> Extracted:
    labels = unique_labels(job.labels or [])
    runtime = target.runtime
    relex = relex_options(job.options, labels, threshold, runtime.relation_threshold, MAX_EXTRACT_LABELS)
    (encoded, words), tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, labels, relex.relation_labels), len(job.texts)
    )
    submitted = await submit_extract(
        state,
        target,
        encoded,
        tokenization_ms,
        ResultKind.TOKEN_SCORES,
        key=_batch_key(target, threshold),
        scalar=threshold,  # the forward picks relation candidates with it
    )
    rows = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    width = prompts.settings.max_width
    decoded = [
        decode_item(rows[i], words[i], text, labels, relex, width, threshold)
        for i, text in enumerate(job.texts)
    ]
    # Relations name the entities as found; a merge changes only the entity list.
    entities = [
        merge_adjacent(found, text) if merge else found
        for (found, _), text in zip(decoded, job.texts, strict=True)
    ]
    return Extracted(
        entities=entities,
        classifications=[[] for _ in job.texts],
        relations=[relations for _, relations in decoded],
        input_tokens=submitted.input_tokens,
        tokenization_ms=submitted.tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def _batch_key(target: Target, threshold: float) -> int:
    """Requests share a device batch only with the same threshold (the device reads one per batch)."""
    lora = target.lora
    extra = (lora,) if lora is not None else ()
    key = config_key(target.profile_name, *extra, f"relex threshold={threshold!r}")
    return key if lora is None else with_lora(key, lora_index(target.config, lora))
