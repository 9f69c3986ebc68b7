"""The extract runner of GLiNER unions: every member reads every window of every text, and their
spans are composed (sie/frontend/gliner_union.py has the recipe).

`params.labels` (else the profile's `default_labels`; with neither, a 400) go to every member. The
options `score_floor`, `window_words`, `window_overlap`, `propagate_label`, `name_min_letters` and
`default_labels` override the profile's; the members run at their own settings (`threshold` and
the other GLiNER options of a request do not reach them). Input tokens count every member's tokens
of every window, as SIE meters a union.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sie.errors import InvalidInput
from sie.frontend.gliner import GlinerPrompts, decode, merge_adjacent
from sie.frontend.gliner_union import Span, compose, word_windows
from sie.frontend.pipeline import TokenResults, admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target, config_key
from sie.frontend.tasks.extract import Extracted, ExtractJob, submit_extract
from sie.gliner_union import UNION_OPTIONS, Member, UnionOptions, parse_members, union_options
from sie.model_config import ModelConfig
from sie.model_location import resolve_weights_dir
from sie.shm.layout import ResultKind

MAX_LABEL_CHARS = 128  # SIE's cap on one label of a GLiNER model


@dataclass(frozen=True, slots=True)
class UnionMember:
    """One member as the frontend uses it: its settings and its prompts."""

    settings: Member
    prompts: GlinerPrompts


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows of a request's texts, flat: window w is `rows[w]`, of text `owners[w]`, at `starts[w]`."""

    rows: list[str]
    owners: list[int]
    starts: list[int]


async def run_gliner_union(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    runtime = target.runtime
    try:
        options = union_options(
            {**{k: getattr(runtime, k) for k in UNION_OPTIONS}, **_overrides(job.options)}
        )
    except ValueError as exc:
        raise InvalidInput(f"options: {exc}") from None
    labels = list(job.labels or options.default_labels)
    if not labels:
        raise InvalidInput("This model needs labels: pass params.labels, or set the default_labels option")
    if any(len(label) > MAX_LABEL_CHARS for label in labels):
        raise InvalidInput(f"GLiNER labels may have at most {MAX_LABEL_CHARS} characters each")
    admit(state, target, len(job.texts))
    config = target.config
    members = state.tokenizers.built(config, "gliner_union", lambda: union_members(config))
    windows = _windows(job.texts, options)
    results = await asyncio.gather(
        *(
            _member_spans(state, target, index, member, windows, labels)
            for index, member in enumerate(members)
        )
    )
    per_text = [[spans[i] for spans, _ in results] for i in range(len(job.texts))]
    entities = [compose(text, found, options) for text, found in zip(job.texts, per_text, strict=True)]
    return _extracted(entities, [submitted for _, submitted in results])


def union_members(config: ModelConfig) -> list[UnionMember]:
    """The model's members, first its own weights (the default profile's, as the device loads them)."""
    others = parse_members(config.profile().adapter_options.loadtime.get("members"))
    first = UnionMember(
        Member(path=str(resolve_weights_dir(config))), GlinerPrompts.from_dir(resolve_weights_dir(config))
    )
    return [first, *(UnionMember(member, GlinerPrompts.from_dir(member.folder())) for member in others)]


def _overrides(options: dict[str, Any]) -> dict[str, Any]:
    """A request's composition options; an explicit null propagate_label turns propagation off."""
    given = {key: options[key] for key in UNION_OPTIONS if key in options}
    if "propagate_label" in given and given["propagate_label"] is None:
        given["propagate_label"] = ""
    return given


def _windows(texts: Sequence[str], options: UnionOptions) -> Windows:
    rows, owners, starts = [], [], []
    for index, text in enumerate(texts):
        for start, end in word_windows(text, options.window_words, options.window_overlap):
            rows.append(text[start:end])
            owners.append(index)
            starts.append(start)
    return Windows(rows, owners, starts)


async def _member_spans(
    state: FrontendState,
    target: Target,
    index: int,
    member: UnionMember,
    windows: Windows,
    labels: list[str],
) -> tuple[list[list[Span]], TokenResults]:
    """Each text's spans as one member finds them in its windows, in the text's offsets."""
    (encoded, words), tokenization_ms = await tokenize(
        lambda: member.prompts.encode(windows.rows, labels), len(windows.rows)
    )
    submitted = await submit_extract(
        state,
        target,
        encoded,
        tokenization_ms,
        ResultKind.TOKEN_SCORES,
        key=config_key(target.profile_name, f"union member={index}"),
        scalar=float(index),  # which member runs the batch
    )
    scores = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    settings = member.settings
    spans: list[list[Span]] = [[] for _ in range(max(windows.owners, default=-1) + 1)]
    for w, row in enumerate(windows.rows):
        found = decode(
            scores[w],
            len(words[w]),
            labels,
            words[w],
            row,
            settings.threshold,
            settings.flat_ner,
            settings.multi_label,
        )
        if settings.merge_adjacent_entities:
            found = merge_adjacent(found, row)
        offset = windows.starts[w]
        spans[windows.owners[w]] += [
            Span(e["start"] + offset, e["end"] + offset, e["label"], e["score"]) for e in found
        ]
    return spans, submitted


def _extracted(entities: list[list[dict[str, Any]]], submitted: list[TokenResults]) -> Extracted:
    return Extracted(
        entities=entities,
        classifications=[[] for _ in entities],
        input_tokens=sum(s.input_tokens for s in submitted),
        tokenization_ms=sum(s.tokenization_ms for s in submitted),
        queue_ms=max(s.queue_ms for s in submitted),
        inference_ms=sum(s.inference_ms for s in submitted),
    )
