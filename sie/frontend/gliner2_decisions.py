"""GLiNER2.5-Decide requests as classification tasks, and each task's logits back as its answer.

The model reads a classification task as a name, an optional prompt and its labels, each label
with an optional description. A request asks in one of three shapes, as SIE's Decide adapter
takes them:

- `params.output_schema`: Laya's typed questions `{id: {type, instructions, criteria}}`. The id
  is the task name and `instructions` its prompt. A `choice` question's labels are its criteria
  (a criterion's text describes its label); a `score` question's labels are the levels "0".."k-1",
  each described by its criterion; a `noul` question's labels are "yes" and "no" (or its own
  `labels` wording), described by `criteria.true` and `criteria.false`.
- `options.label_groups`: GLiClass's `{group: [label, ...]}`, one task per group, each with
  `params.instruction` as its prompt.
- `params.labels`: one task, named `options.classification_task` (default "label").

A single-label task is a softmax over its labels, a multi-label task a sigmoid per label, as
gliner2's classifier computes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sie.errors import InvalidInput
from sie.frontend.gliner2 import SPECIAL_TOKENS, Schema, checked_threshold, schema_head
from sie.frontend.laya import entropy_confidence, render_criterion
from sie.frontend.laya_questions import parse_question

TaskKind = Literal["choice", "score", "noul", "group", "labels"]
Mode = Literal["questions", "groups", "labels"]

MAX_TASKS = 64  # questions or label groups: all of them share each item's one row
MAX_LABELS_PER_TASK = 64  # gliner2's default candidate cap per classification task
MAX_LABELS = 1024
MAX_NAME_CHARS = 128  # a question id or group name
MAX_LABEL_CHARS = 256
MAX_TEXT_CHARS = 2048  # one prompt or description
MAX_SCHEMA_CHARS = 65_536  # every string of the task schema together
DEFAULT_LABELS_TASK = "label"
NOUL_WORDS = ("no", "yes")  # the (false, true) labels a noul question reads by default
DEFAULT_MULTI_LABEL_THRESHOLD = 0.5
OVERFLOW_POLICIES = ("default", "truncate_text", "error")


@dataclass(frozen=True, slots=True)
class DecisionTask:
    """One classification task: what the model reads (`name`, `labels`, `descriptions`, `prompt`)
    and how its answer is keyed (`key` in data, `keys` per label)."""

    key: str
    name: str
    kind: TaskKind
    labels: tuple[str, ...]
    keys: tuple[str, ...]
    descriptions: tuple[str | None, ...]
    prompt: str | None = None
    multi_label: bool = False
    legend: tuple[Any, ...] = ()  # a score question's levels, level 0 first

    def schema(self) -> Schema:
        """The task as gliner2's processor writes it: `name: prompt`, then each described label as
        `[DESCRIPTION] label: description`, in label order."""
        described = [(label, d) for label, d in zip(self.labels, self.descriptions, strict=True) if d]
        return Schema("classification", schema_head(self.name, self.prompt, described), self.labels)

    def free_texts(self) -> Iterator[str]:
        """The caller's free text this task puts before every document (counted as input tokens)."""
        if self.prompt:
            yield self.prompt
        yield from (d for d in self.descriptions if d)


@dataclass(frozen=True, slots=True)
class Decisions:
    """A checked request: its tasks in order, how answers are reported, and its options."""

    mode: Mode
    tasks: tuple[DecisionTask, ...]
    threshold: float = 0.0
    overflow: str = "default"

    def split(self, logits: np.ndarray) -> list[np.ndarray]:
        """A row's label logits, one array per task (each task's labels are consecutive)."""
        bounds = np.cumsum([len(task.labels) for task in self.tasks])[:-1]
        return np.split(np.asarray(logits, np.float64).reshape(-1), bounds)


def parse_decisions(
    labels: list[str] | None, output_schema: Any, instruction: str | None, options: Mapping[str, Any]
) -> Decisions:
    """Check a request and build its tasks, every bound before anything is tokenized."""
    groups = options.get("label_groups")
    if options.get("group_encoding") not in (None, "joint"):
        raise InvalidInput(
            "GLiNER2.5-Decide scores every question and label group of an item in one row "
            "(group_encoding 'joint'); other encodings are not supported"
        )
    if options.get("examples") is not None:
        raise InvalidInput("GLiNER2.5-Decide does not take few-shot examples")
    overflow = options.get("overflow_policy", "default")
    if overflow not in OVERFLOW_POLICIES:
        raise InvalidInput(f"GLiNER2.5-Decide overflow_policy must be one of {list(OVERFLOW_POLICIES)}")
    if output_schema is not None:
        if labels:
            raise InvalidInput(
                "GLiNER2.5-Decide takes either output_schema (typed questions) or labels, not both"
            )
        if groups is not None:
            raise InvalidInput(
                "GLiNER2.5-Decide takes either output_schema (typed questions) or label_groups, not both"
            )
        if instruction is not None:
            raise InvalidInput(
                "GLiNER2.5-Decide reads each question's own 'instructions' from output_schema; "
                "params.instruction applies only to labels and label_groups"
            )
        decisions = Decisions("questions", _question_tasks(output_schema), overflow=overflow)
    else:
        prompt = _free_text(instruction, "instruction")
        multi_label = _multi_label(options)
        threshold = checked_threshold(options.get("threshold", 0.0))
        if groups is not None:
            if labels:
                raise InvalidInput("GLiNER2.5-Decide takes either labels or options.label_groups, not both")
            tasks = _group_tasks(groups, prompt, multi_label)
            decisions = Decisions("groups", tasks, threshold, overflow)
        elif labels:
            task = _labels_task(labels, options.get("classification_task"), prompt, multi_label)
            decisions = Decisions("labels", (task,), threshold, overflow)
        else:
            raise InvalidInput(
                "GLiNER2.5-Decide needs typed questions in params.output_schema, options.label_groups, "
                "or params.labels"
            )
    _check_totals(decisions.tasks)
    return decisions


def _question_tasks(output_schema: Any) -> tuple[DecisionTask, ...]:
    if not isinstance(output_schema, Mapping) or not output_schema:
        raise InvalidInput(
            "GLiNER2.5-Decide output_schema must map question ids to {type, instructions, criteria}"
        )
    if len(output_schema) > MAX_TASKS:
        raise InvalidInput(
            f"GLiNER2.5-Decide accepts at most {MAX_TASKS} questions, got {len(output_schema)}"
        )
    tasks = []
    for qid, qdef in output_schema.items():
        criteria = qdef.get("criteria") if isinstance(qdef, Mapping) else None
        if isinstance(criteria, Mapping | list) and len(criteria) > MAX_LABELS_PER_TASK:
            raise InvalidInput(
                f"question {str(qid)[:64]!r}: GLiNER2.5-Decide accepts at most {MAX_LABELS_PER_TASK} "
                f"options per question, got {len(criteria)}"
            )
        tasks.append(_question_task(str(qid), qdef))
    return _unique_names(tasks)


def _question_task(qid: str, qdef: Mapping[str, Any]) -> DecisionTask:
    question = parse_question(qid, qdef)
    where = f"question {qid[:64]!r}"
    name = _name(qid, f"{where}: the question id", MAX_NAME_CHARS)
    prompt = _free_text(question.instructions, f"{where}: instructions")
    if question.qtype == "choice":
        keys = tuple(question.criteria)
        descriptions = tuple(_description(v, where) for v in question.criteria.values())
        return DecisionTask(qid, name, "choice", _labels(keys, where), keys, descriptions, prompt)
    if question.qtype == "score":
        levels = tuple(question.criteria)
        labels = tuple(str(i) for i in range(len(levels)))
        descriptions = tuple(
            None
            if level in (None, "") or (isinstance(level, str) and level.strip() == label)
            else _description(level, where)
            for label, level in zip(labels, levels, strict=True)
        )
        return DecisionTask(qid, name, "score", labels, labels, descriptions, prompt, legend=levels)
    false_word, true_word = question.labels if qdef.get("labels") is not None else NOUL_WORDS
    criteria = question.criteria or {}
    descriptions = (_description(criteria.get("true"), where), _description(criteria.get("false"), where))
    labels = _labels((true_word, false_word), where)
    return DecisionTask(qid, name, "noul", labels, ("true", "false"), descriptions, prompt)


def _group_tasks(groups: Any, prompt: str | None, multi_label: bool) -> tuple[DecisionTask, ...]:
    if not isinstance(groups, Mapping) or not groups:
        raise InvalidInput("GLiNER2.5-Decide label_groups must map group names to non-empty label lists")
    if len(groups) > MAX_TASKS:
        raise InvalidInput(f"GLiNER2.5-Decide accepts at most {MAX_TASKS} label groups, got {len(groups)}")
    tasks = []
    for group, members in groups.items():
        where = f"label_groups[{str(group)[:64]!r}]"
        if not isinstance(members, list) or not members:
            raise InvalidInput(f"GLiNER2.5-Decide {where} must be a non-empty list of labels")
        if len(members) > MAX_LABELS_PER_TASK:
            raise InvalidInput(
                f"GLiNER2.5-Decide {where} may have at most {MAX_LABELS_PER_TASK} labels, got {len(members)}"
            )
        name = _name(group, f"{where}: the group name", MAX_NAME_CHARS)
        labels = _labels(members, where)
        tasks.append(
            DecisionTask(
                group, name, "group", labels, tuple(members), (None,) * len(labels), prompt, multi_label
            )
        )
    return _unique_names(tasks)


def _labels_task(labels: Any, task: Any, prompt: str | None, multi_label: bool) -> DecisionTask:
    if not isinstance(labels, list):
        raise InvalidInput("GLiNER2.5-Decide labels must be a list of non-empty strings")
    if len(labels) > MAX_LABELS_PER_TASK:
        raise InvalidInput(
            f"GLiNER2.5-Decide accepts at most {MAX_LABELS_PER_TASK} labels per task, got {len(labels)}"
        )
    name = DEFAULT_LABELS_TASK if task is None else _name(task, "classification_task", MAX_NAME_CHARS)
    checked = _labels(labels, "labels")
    return DecisionTask(
        name, name, "labels", checked, tuple(labels), (None,) * len(labels), prompt, multi_label
    )


def _labels(values: Sequence[Any], where: str) -> tuple[str, ...]:
    labels = tuple(_name(value, f"{where}: a label", MAX_LABEL_CHARS) for value in values)
    if len(set(labels)) != len(labels):
        raise InvalidInput(
            f"GLiNER2.5-Decide {where}: labels must be unique once surrounding spaces are removed"
        )
    return labels


def _unique_names(tasks: list[DecisionTask]) -> tuple[DecisionTask, ...]:
    names = [task.name for task in tasks]
    if len(set(names)) != len(names):
        raise InvalidInput(
            "GLiNER2.5-Decide question ids and label group names must be unique once stripped of spaces"
        )
    return tuple(tasks)


def _name(value: Any, what: str, limit: int) -> str:
    """A task name or label as the model reads it: stripped, non-empty, bounded, no marker token."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"GLiNER2.5-Decide {what} must be a non-empty string")
    if len(value) > limit:
        raise InvalidInput(f"GLiNER2.5-Decide {what} may have at most {limit} characters, got {len(value)}")
    _check_markers(value, what)
    return value.strip()


def _free_text(value: Any, what: str) -> str | None:
    """A prompt or description as the model reads it: None when blank, else bounded, no marker."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"GLiNER2.5-Decide {what} must be a string")
    if len(value) > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"GLiNER2.5-Decide {what} may have at most {MAX_TEXT_CHARS} characters, got {len(value)}"
        )
    _check_markers(value, what)
    return value.strip() or None


def _description(value: Any, where: str) -> str | None:
    """A criterion as its label's description: a string as given, anything else as JSON."""
    if value is None or value == "":
        return None
    return _free_text(render_criterion(value), f"{where}: a criterion")


def _check_markers(value: str, what: str) -> None:
    for marker in SPECIAL_TOKENS:
        if marker in value:
            raise InvalidInput(
                f"GLiNER2.5-Decide {what} may not contain {marker!r}, a structural token of its prompt"
            )


def _check_totals(tasks: Sequence[DecisionTask]) -> None:
    count = sum(len(task.labels) for task in tasks)
    if count > MAX_LABELS:
        raise InvalidInput(
            f"GLiNER2.5-Decide accepts at most {MAX_LABELS} labels or answer options per request, got {count}"
        )
    chars = sum(
        len(task.name) + sum(map(len, task.labels)) + sum(map(len, task.free_texts())) for task in tasks
    )
    if chars > MAX_SCHEMA_CHARS:
        raise InvalidInput(
            f"GLiNER2.5-Decide questions, labels, prompts and descriptions may total at most "
            f"{MAX_SCHEMA_CHARS} characters, got {chars}"
        )


def _multi_label(options: Mapping[str, Any]) -> bool:
    """`classification_type` (GLiClass's spelling) or `multi_label` (gliner2's); single by default."""
    kind, multi = options.get("classification_type"), options.get("multi_label")
    if multi is not None and not isinstance(multi, bool):
        raise InvalidInput("GLiNER2.5-Decide multi_label must be a boolean")
    if kind is None:
        return bool(multi)
    if kind not in ("single-label", "multi-label"):
        raise InvalidInput("GLiNER2.5-Decide classification_type must be 'single-label' or 'multi-label'")
    if multi is not None and multi != (kind == "multi-label"):
        raise InvalidInput("GLiNER2.5-Decide multi_label contradicts classification_type")
    return kind == "multi-label"


def probabilities(task: DecisionTask, logits: np.ndarray) -> np.ndarray:
    """A softmax over a single-label task's logits, or a sigmoid per label of a multi-label one."""
    z = np.asarray(logits, np.float64)
    if task.multi_label:
        return np.exp(-np.logaddexp(0.0, -z))
    e = np.exp(z - z.max())
    return e / e.sum()


def answer(task: DecisionTask, p: np.ndarray, threshold: float = 0.0) -> dict[str, Any]:
    """A task's answer in `data`, shaped as Laya answers a question and GLiClass a label group."""
    probs = {key: float(value) for key, value in zip(task.keys, p, strict=True)}
    if task.kind == "score":
        return {
            "type": "score",
            "score": float(np.dot(np.arange(len(p), dtype=np.float64), p)),
            "legend": {str(i): level for i, level in enumerate(task.legend)},
            "probabilities": probs,
            "confidence": entropy_confidence(p),
        }
    if task.kind == "noul":
        p_true, p_false = float(p[0]), float(p[1])
        return {
            "type": "noul",
            "noul": p_true,
            "answer": p_true > p_false,
            "confidence": max(p_true, 1.0 - p_true),
        }
    if task.multi_label:
        cut = threshold if threshold > 0.0 else DEFAULT_MULTI_LABEL_THRESHOLD
        return {"labels": [key for key, value in probs.items() if value >= cut], "probabilities": probs}
    return {
        "type": "choice",
        "choice": task.keys[int(np.argmax(p))],
        "probabilities": probs,
        "confidence": entropy_confidence(p),
    }


def ranked(decisions: Decisions, per_task: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Every label at or above the threshold with its probability, best first; a label group's
    labels are named "group.label", as the GLiClass adapter names them."""
    found = []
    for task, p in zip(decisions.tasks, per_task, strict=True):
        for key, value in zip(task.keys, p, strict=True):
            if float(value) >= decisions.threshold:
                label = f"{task.key}.{key}" if decisions.mode == "groups" else key
                found.append({"label": label, "score": float(value)})
    found.sort(key=lambda c: c["score"], reverse=True)
    return found
