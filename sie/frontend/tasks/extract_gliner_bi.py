"""The extract runner of GLiNER bi-encoder models: entities of the request's labels in each text.

Options follow SIE's GLiNER-bi adapter: `threshold` (the profile's, else 0.5), `flat_ner` (default
true), `multi_label` (default false) and `precompute_labels`. The device always keeps label
embeddings per label set, which gives the same scores as encoding them anew, so
`precompute_labels` is checked but changes nothing. Relation labels are refused, as SIE refuses them.
"""

from __future__ import annotations

from typing import Any

from sie.errors import InvalidInput
from sie.frontend.gliner import decode
from sie.frontend.gliner_bi import GlinerBiInputs
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, submit_extract
from sie.shm.layout import ResultKind

DEFAULT_THRESHOLD = 0.5  # SIE's GLiNER-bi default (its catalog profiles say 0.3)


async def run_gliner_bi(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    labels = job.labels or []
    runtime = target.runtime
    options = job.options
    if options.get("relation_labels"):
        raise InvalidInput(
            "GLiNER bi-encoder models do not extract relations; options.relation_labels is not supported"
        )
    configured = runtime.threshold if runtime.threshold is not None else DEFAULT_THRESHOLD
    threshold = checked_threshold(options.get("threshold", configured))
    flat_ner = checked_flag(options, "flat_ner", True)
    multi_label = checked_flag(options, "multi_label", runtime.multi_label)
    checked_flag(options, "precompute_labels", True)
    admit(state, target, len(job.texts))
    profile = target.profile_name
    inputs = state.tokenizers.built(
        config, f"gliner_bi:{profile}", lambda: GlinerBiInputs.for_model(config, profile)
    )
    (encoded, words), tokenization_ms = await tokenize(
        lambda: inputs.encode(job.texts, labels), len(job.texts)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    scores = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    entities = [
        decode(scores[i], len(words[i]), labels, words[i], text, threshold, flat_ner, multi_label)
        for i, text in enumerate(job.texts)
    ]
    return Extracted(
        entities=entities,
        classifications=[[] for _ in job.texts],
        input_tokens=submitted.input_tokens,
        tokenization_ms=submitted.tokenization_ms,
        queue_ms=submitted.queue_ms,
        inference_ms=submitted.inference_ms,
    )


def checked_threshold(value: Any) -> float:
    message = "GLiNER-bi threshold must be a finite number between 0 and 1"
    # Compared, not converted: NaN compares false, and a JSON integer may not fit a float.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(message)
    if not 0.0 <= value <= 1.0:
        raise InvalidInput(message)
    return float(value)


def checked_flag(options: dict[str, Any], key: str, default: bool) -> bool:
    value = options.get(key, default)
    if not isinstance(value, bool):
        raise InvalidInput(f"options.{key} must be a boolean")
    return value
