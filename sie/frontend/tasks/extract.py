"""The extract task: its job and result types, the route's checks, and the dispatch to a runner.

Each family's spec in sie.families names its runner ("module:function", imported on first use):
text families in `extract_text`, GLiNER variants in `extract_gliner*`, images in `detect` and
`ground`, audio in `transcribe` and `parakeet`. Runners import this module; it imports none of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sie.errors import InvalidInput
from sie.families import family_of
from sie.frontend.pipeline import TokenResults, submit
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.wire import Item, option_fraction
from sie.model_config import ModelConfig
from sie.shm.layout import Op, ResultKind

MAX_EXTRACT_LABELS = 1000  # SIE's cap: zero-shot work grows with every label


@dataclass(frozen=True, slots=True)
class ExtractJob:
    texts: list[str]
    labels: list[str] | None
    options: dict[str, Any]
    items: Sequence[Item] = ()  # the request's items, for the families that read images or audio
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
ExtractRunner = Callable[[FrontendState, Target, ExtractJob], Awaitable[Extracted]]


def check_extraction(config: ModelConfig, name: str, labels: list[str] | None) -> None:
    if not config.supports_extract():
        raise InvalidInput(f"Model '{name}' does not support extraction")
    if family_of(config.family).extract_needs_labels and not labels:
        raise InvalidInput(f"Model '{name}' is a zero-shot model: params.labels must list at least one label")
    if labels and any(not label.strip() for label in labels):
        raise InvalidInput("params.labels must not contain empty labels")
    if labels and len(labels) > MAX_EXTRACT_LABELS:
        raise InvalidInput(f"Field 'labels' must contain at most {MAX_EXTRACT_LABELS} labels")


async def extract(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    """The family's runner (named in sie.families, imported on first use), on a job its route checked."""
    run: ExtractRunner = target.family.extract_function()
    return await run(state, target, job)


async def submit_extract(
    state: FrontendState,
    target: Target,
    encoded: Any,
    tokenization_ms: float,
    kind: ResultKind,
    *,
    key: int | None = None,
    scalar: float = 0.0,
) -> TokenResults:
    """One extract job's tokens to the device for one kind of result (see pipeline.submit)."""
    return await submit(
        state,
        target,
        encoded,
        op=Op.EXTRACT,
        kinds={kind},
        key=key,
        tokenization_ms=tokenization_ms,
        scalar=scalar,
    )


def extracted_from(
    submitted: TokenResults,
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


def threshold_option(
    options: dict[str, Any], configured: float | None, *, default: float, name: str = "threshold"
) -> float:
    """`options.<name>` (0 to 1), else the profile's `configured` value, else `default`."""
    return option_fraction(name, options.get(name, configured if configured is not None else default))


def instruction_of(job: ExtractJob) -> str | None:
    """The request's instruction, else `options.instruction` (SIE's order)."""
    found: Any = job.instruction if job.instruction is not None else job.options.get("instruction")
    if found is not None and not isinstance(found, str):
        raise InvalidInput("options.instruction must be a string")
    return found
