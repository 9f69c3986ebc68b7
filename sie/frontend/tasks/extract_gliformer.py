"""`/v1/extract` for GLiFormer models: entities over `params.labels` (sie/frontend/gliformer.py)."""

from __future__ import annotations

from sie.errors import InvalidInput
from sie.frontend.gliformer import DEFAULT_THRESHOLD, MIN_THRESHOLD, GliformerPrompts, decode
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, extracted_from, submit_extract, threshold_option
from sie.shm.layout import ResultKind

# SIE's GLiFormer options for the heads not served here: a request naming one is refused, not ignored.
UNSERVED_OPTIONS = ("relation_labels", "relations", "label_groups", "classification_task", "output_schema")


async def run_gliformer(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    for name in UNSERVED_OPTIONS:
        if job.options.get(name) is not None:
            raise InvalidInput(
                f"options.{name} is not served for GLiFormer models here: only entity extraction "
                "over params.labels is"
            )
    labels = job.labels or []
    threshold = threshold_option(job.options, target.runtime.threshold, default=DEFAULT_THRESHOLD)
    if threshold < MIN_THRESHOLD:
        raise InvalidInput(f"options.threshold must be at least {MIN_THRESHOLD} for GLiFormer entities")
    flat_ner = _flag(job.options, "flat_ner", True)
    multi_label = _flag(job.options, "multi_label", False)
    config = target.config
    admit(state, target, len(job.texts))
    prompts = state.tokenizers.derived(
        config, "gliformer", lambda tok: GliformerPrompts.for_model(tok, config)
    )
    (encoded, words), tokenization_ms = await tokenize(
        lambda: prompts.encode(job.texts, labels), len(job.texts)
    )
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    scores = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    entities = [
        decode(scores[i], labels, words[i], text, threshold, flat_ner, multi_label)
        for i, text in enumerate(job.texts)
    ]
    return extracted_from(submitted, entities=entities)


def _flag(options: dict, name: str, default: bool) -> bool:
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise InvalidInput(f"options.{name} must be a boolean")
    return value
