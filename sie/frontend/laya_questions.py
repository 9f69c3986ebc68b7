"""Laya request checks: `params.output_schema` (typed questions) or `params.labels`, to Questions.

A question that cannot be answered is a 400 naming it, where the `laya` package would fail
later or quietly answer a different question (SIE's adapter refuses the same).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sie.errors import InvalidInput
from sie.frontend.laya import (
    DEFAULT_LABELS_INSTRUCTION,
    LABELS_QUESTION_ID,
    MAX_OPTIONS,
    MAX_QUESTIONS,
    QTYPES,
    Question,
)


def request_questions(
    output_schema: Any, labels: list[str] | None, instruction: str | None
) -> tuple[list[Question], list[str] | None]:
    """The request's questions, and the caller's labels when `labels` (one choice question) drives it."""
    if output_schema is not None:
        if labels:
            raise InvalidInput(
                "Laya takes either params.output_schema (typed questions) or params.labels, not both"
            )
        if instruction is not None:
            raise InvalidInput(
                "Laya reads each question's own 'instructions'; params.instruction applies to labels"
            )
        if not isinstance(output_schema, Mapping) or not output_schema:
            raise InvalidInput(
                "Laya params.output_schema must map question ids to {type, instructions, criteria}"
            )
        if len(output_schema) > MAX_QUESTIONS:
            raise InvalidInput(
                f"Laya accepts at most {MAX_QUESTIONS} questions per request, got {len(output_schema)}"
            )
        questions = [parse_question(str(qid), qdef) for qid, qdef in output_schema.items()]
        options = sum(2 if q.qtype == "noul" else len(q.criteria) for q in questions)
        if options > MAX_OPTIONS:
            raise InvalidInput(
                f"Laya accepts at most {MAX_OPTIONS} answer options per request, got {options}"
            )
        return questions, None
    if not labels:
        raise InvalidInput("Laya needs typed questions in params.output_schema, or params.labels")
    if len(labels) > MAX_OPTIONS:
        raise InvalidInput(f"Laya accepts at most {MAX_OPTIONS} labels per request, got {len(labels)}")
    stripped = [label.strip() for label in labels]
    if len(set(stripped)) != len(stripped):
        raise InvalidInput("Laya labels must be unique")
    text = instruction if instruction is not None else DEFAULT_LABELS_INSTRUCTION
    question = Question(LABELS_QUESTION_ID, "choice", text, dict.fromkeys(stripped))
    return [question], list(labels)


def parse_question(qid: str, qdef: Any) -> Question:
    """One question definition checked and normalized (choice lists become label -> None dicts)."""
    if not isinstance(qdef, Mapping):
        raise InvalidInput(f"question {qid!r}: the definition must be an object")
    qtype = qdef.get("type")
    if qtype not in QTYPES:
        raise InvalidInput(f"question {qid!r}: unknown type {qtype!r}; use one of {sorted(QTYPES)}")
    if "instructions" not in qdef:
        raise InvalidInput(f"question {qid!r}: no 'instructions'")
    instructions = qdef["instructions"]
    if not isinstance(instructions, str):
        try:
            instructions = json.dumps(instructions, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"question {qid!r}: 'instructions' must be a string or JSON") from exc
    crit = qdef.get("criteria")
    if "labels" in qdef and qtype != "noul":
        raise InvalidInput(f"question {qid!r}: 'labels' is only supported for noul questions")
    if qtype == "choice":
        if isinstance(crit, list):
            if not all(isinstance(label, str) for label in crit):
                raise InvalidInput(f"question {qid!r}: a choice question's list criteria must be strings")
            crit = dict.fromkeys(crit)
        if not isinstance(crit, Mapping) or not crit:
            raise InvalidInput(
                f"question {qid!r}: a choice question needs 'criteria' (labels, or label -> description)"
            )
        return Question(qid, qtype, instructions, dict(crit))
    if qtype == "score":
        if not isinstance(crit, list) or not crit:
            raise InvalidInput(f"question {qid!r}: a score question needs 'criteria' as a list of levels")
        return Question(qid, qtype, instructions, list(crit))
    if crit is not None:
        if not isinstance(crit, Mapping):
            raise InvalidInput(
                f"question {qid!r}: a noul question's 'criteria' must be an object keyed true/false"
            )
        crit = {str(k).lower(): v for k, v in crit.items()}
        if not set(crit) <= {"true", "false"}:
            raise InvalidInput(
                f"question {qid!r}: a noul question's 'criteria' takes only 'true' and 'false' keys"
            )
    return Question(qid, qtype, instructions, crit, noul_labels(qid, qdef.get("labels")))


def noul_labels(qid: str, labels: Any) -> tuple[str, str]:
    """A noul question's (false, true) wording; the defaults are 'false' and 'true'."""
    if labels is None:
        return ("false", "true")
    error = f"question {qid!r}: noul labels must map exactly 'false' and 'true' to distinct non-empty strings"
    if not isinstance(labels, Mapping) or set(labels) != {"false", "true"}:
        raise InvalidInput(error)
    false, true = labels["false"], labels["true"]
    if not isinstance(false, str) or not isinstance(true, str):
        raise InvalidInput(error)
    false, true = false.strip(), true.strip()
    if not false or not true or false == true:
        raise InvalidInput(error)
    return (false, true)


def budget_options(options: dict[str, Any], max_len: int, head_max_len: int) -> tuple[int, int]:
    """`options.max_len` (at most the checkpoint's) and `options.head_max_len` (at most max_len)."""
    asked = [options.get(name) for name in ("max_len", "head_max_len")]
    for name, value in zip(("max_len", "head_max_len"), asked, strict=True):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise InvalidInput(f"Laya options.{name} must be a positive integer")
    rows = asked[0] if asked[0] is not None else max_len
    if rows > max_len:
        raise InvalidInput(f"Laya options.max_len must be at most {max_len} for this model")
    head = asked[1] if asked[1] is not None else head_max_len
    if asked[1] is not None and head > rows:
        raise InvalidInput(f"Laya options.head_max_len must be at most max_len ({rows})")
    return rows, head
