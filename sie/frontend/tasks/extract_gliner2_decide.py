"""Extract runner of GLiNER2.5-Decide: typed answers in `data`, label scores in `classifications`.

Each item is one row holding every task of the request (sie/frontend/gliner2_decide.py); the
device returns one logit per label. Typed questions answer in `data` only, plain labels in
`classifications` only, label groups in both (as SIE's Decide adapter reports them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sie.errors import InferenceError, InputTooLong, InvalidInput
from sie.frontend.gliner2_decide import DecideRows, Document
from sie.frontend.gliner2_decisions import Decisions, answer, parse_decisions, probabilities, ranked
from sie.frontend.laya import serialize_state
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, extracted_from, submit_extract
from sie.frontend.tokenize import Encoded
from sie.frontend.wire import Item
from sie.shm.layout import ResultKind

FAMILY_NAME = "GLiNER2.5-Decide"


async def run_gliner2_decide(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    config = target.config
    decisions = parse_decisions(job.labels, job.output_schema, job.instruction, job.options)
    items = list(job.items) or [Item(text=text) for text in job.texts]
    if not items:
        raise InvalidInput(f"{FAMILY_NAME} needs at least one item")
    states = [item_state(item) for item in items]
    admit(state, target, len(items))
    rows = state.tokenizers.built(config, "gliner2_decide", lambda: DecideRows.for_model(config))

    def build() -> tuple[Encoded, int]:
        prefix = rows.prefix(decisions)
        room = rows.window - len(prefix.ids)
        documents = [rows.document(text, room, from_end=from_end) for text, from_end in states]
        for document in documents:
            check_fits(document, decisions, rows.window, room)
        own = sum(d.own_tokens for d in documents) + prefix.free_tokens * len(documents)
        return rows.encode(prefix, documents), own

    (encoded, own_tokens), tokenization_ms = await tokenize(build, len(items))
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    logits = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    per_item = [item_probabilities(decisions, row) for row in logits]
    found = extracted_from(submitted, n_items=len(items))
    found.input_tokens = own_tokens
    if decisions.mode != "questions":
        found.classifications = [ranked(decisions, p) for p in per_item]
    if decisions.mode != "labels":
        found.data = [
            {
                task.key: answer(task, p, decisions.threshold)
                for task, p in zip(decisions.tasks, ps, strict=True)
            }
            for ps in per_item
        ]
    return found


def item_state(item: Item) -> tuple[str, bool]:
    """An item's document, and whether it is read from its end (a list of turns)."""
    text, from_end = serialize_state(item, FAMILY_NAME)
    if not text or text.isspace():
        raise InvalidInput(
            f"{FAMILY_NAME} items need a non-blank text, or metadata.state holding a string, a JSON object "
            "or a list of turns"
        )
    return text, from_end


def check_fits(document: Document, decisions: Decisions, window: int, room: int) -> None:
    if not len(document.ids):
        raise InputTooLong(
            f"No word of an item fits in the {room} tokens the questions leave in {FAMILY_NAME}'s "
            f"{window}-token window"
        )
    if not document.complete and decisions.overflow == "error":
        raise InputTooLong(
            f"An item does not fit in the {room} tokens the questions leave in {FAMILY_NAME}'s "
            f"{window}-token window (overflow_policy 'error')"
        )


def item_probabilities(decisions: Decisions, logits: np.ndarray) -> list[Any]:
    if not np.isfinite(logits).all():
        raise InferenceError(f"{FAMILY_NAME} returned non-finite scores for an item")
    return [
        probabilities(task, part) for task, part in zip(decisions.tasks, decisions.split(logits), strict=True)
    ]
