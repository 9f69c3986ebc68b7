"""Extract runner of the Laya family: typed answers in `data`, or label scores in `classifications`.

Each item is a state; each (state, question) pair is one device row (sie/frontend/laya.py), so
the device sees items x questions rows and returns each row's option logits.
"""

from __future__ import annotations

import threading
from pathlib import Path

from sie.errors import InvalidInput
from sie.frontend.laya import LayaPrompts, decode_answer, ranked_labels, serialize_state
from sie.frontend.laya_questions import budget_options, request_questions
from sie.frontend.pipeline import admit, tokenize
from sie.frontend.state import FrontendState
from sie.frontend.target import Target
from sie.frontend.tasks.extract import Extracted, ExtractJob, extracted_from, submit_extract, threshold_option
from sie.frontend.tokenize import Encoded
from sie.frontend.wire import Item
from sie.model_location import resolve_weights_dir
from sie.shm.layout import ResultKind

_PROMPTS: dict[tuple[str, Path, float], LayaPrompts] = {}
_LOCK = threading.Lock()


def laya_prompts(sie_id: str, checkpoint: Path) -> LayaPrompts:
    """One checkpoint's row builder, made once per model folder (its tokenizer is not at the root,
    where the shared tokenizer cache looks)."""
    key = (sie_id, checkpoint, (checkpoint / "tokenizer" / "tokenizer.json").stat().st_mtime)
    with _LOCK:
        found = _PROMPTS.get(key)
        if found is None:
            found = _PROMPTS[key] = LayaPrompts(checkpoint)
        return found


async def run_laya(state: FrontendState, target: Target, job: ExtractJob) -> Extracted:
    questions, labels = request_questions(job.output_schema, job.labels, job.instruction)
    threshold = threshold_option(job.options, target.runtime.threshold, default=0.0) if labels else 0.0
    items = list(job.items) or [Item(text=text) for text in job.texts]
    states = [serialize_state(item) for item in items]
    prompts = laya_prompts(target.config.sie_id, resolve_weights_dir(target.config))
    # The YAML's max_sequence_length may shorten the rows the checkpoint was trained on, never lengthen.
    longest = min(prompts.config.max_len, target.config.max_sequence_length or prompts.config.max_len)
    max_len, head_max_len = budget_options(job.options, longest, prompts.config.head_max_len)
    n_rows = len(states) * len(questions)
    if n_rows == 0:
        raise InvalidInput("Laya needs at least one item")
    admit(state, target, n_rows)

    def build() -> Encoded:
        return prompts.rows(states, prompts.prefixes(questions, max_len, head_max_len), max_len)

    encoded, tokenization_ms = await tokenize(build, n_rows)
    submitted = await submit_extract(state, target, encoded, tokenization_ms, ResultKind.TOKEN_SCORES)
    logits = submitted.results.ragged[ResultKind.TOKEN_SCORES]
    per_item = [logits[i * len(questions) : (i + 1) * len(questions)] for i in range(len(states))]
    if labels is not None:
        classes = [ranked_labels(labels, rows[0], prompts.config, threshold) for rows in per_item]
        return extracted_from(submitted, classifications=classes)
    found = extracted_from(submitted, n_items=len(states))
    found.data = [
        {q.qid: decode_answer(q, row, prompts.config) for q, row in zip(questions, rows, strict=True)}
        for rows in per_item
    ]
    return found
