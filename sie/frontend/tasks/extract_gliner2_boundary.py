"""The extract runner of GLiNER2.5 boundary checkpoints: entities of the request's labels.

As SIE's GLiNER2 entity adapter takes a request: `params.labels` (or the profile's
`default_labels`), and the options `threshold` and `entity_descriptions`, which maps labels to
text that guides the model. Structured output, classification and instructions are refused.
"""

from __future__ import annotations

from typing import Any

from sie.errors import InvalidInput
from sie.frontend.gliner2 import DEFAULT_THRESHOLD, checked_descriptions, checked_threshold, entity_schema
from sie.frontend.gliner2_boundary import BoundaryPrompts, checked_labels, entities
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, submit_extract
from sie.gliner2_checkpoint import Gliner2Checkpoint
from sie.shm.layout import ResultKind

OPTIONS = frozenset({"threshold", "entity_descriptions"})


async def run_gliner2_boundary(
    state: FrontendState, target: Target, job: ExtractJob, checkpoint: Gliner2Checkpoint
) -> Extracted:
    config = target.config
    loadtime = target.profile.adapter_options.loadtime
    if job.output_schema is not None or job.instruction is not None:
        raise InvalidInput("GLiNER2 entities accepts labels, without output_schema or instruction")
    unknown = sorted(set(job.options) - OPTIONS)
    if unknown:
        raise InvalidInput(
            f"GLiNER2 entities supports only the threshold and entity_descriptions options, not {unknown}"
        )
    threshold = checked_threshold(job.options.get("threshold", loadtime.get("threshold", DEFAULT_THRESHOLD)))
    labels = checked_labels(job.labels if job.labels is not None else loadtime.get("default_labels"))
    descriptions = checked_descriptions(job.options.get("entity_descriptions", {}), labels)
    admit(state, target, len(job.texts))
    prompts = state.tokenizers.built(config, "gliner2:boundary", lambda: BoundaryPrompts.for_model(config))
    (encoded, read), tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, [entity_schema(labels, descriptions)]), len(job.texts)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    values = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    found: list[list[dict[str, Any]]] = [
        entities(values[i], labels, words, text, threshold, checkpoint)
        for i, (words, text) in enumerate(zip(read, job.texts, strict=True))
    ]
    return Extracted(
        entities=found,
        classifications=[[] for _ in job.texts],
        data=[{} for _ in job.texts],
        input_tokens=submitted.input_tokens,
        tokenization_ms=submitted.tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )
