"""Laya typed decisions, frontend half: questions in, token rows out, typed answers back.

A request pairs each item (its *state*) with typed questions, as the `laya` package's Agent does:
`choice` (one of N labels), `score` (an ordinal rubric, level 0 first) and `noul` (yes/no). Every
(state, question) pair is one encoder row, laid out as the package lays it out:

    [CLS] "<type> question: <instructions>" [SEP] [MASK] opt0 [MASK] opt1 ... [SEP] state [SEP]

The question half does not depend on the state, so it is tokenized once per request. The device
returns one logit per `[MASK]`; a temperature-scaled softmax over them (the checkpoint's
`rl_agent_config.json`, clamped as the package clamps it) gives the answer. The rows carry each
marker's question type in `aux` (type + 1 at a marker, 0 elsewhere), which the head embeds.

Where this differs from the package, on purpose (as SIE's adapter does): answers are not rounded,
the act head's escalation probability is left out, and a noul answer adds a boolean `answer`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from sie.errors import InvalidInput
from sie.frontend.model_files import token_content
from sie.frontend.tokenize import Encoded

QTYPES: dict[str, int] = {"choice": 0, "score": 1, "noul": 2}
OPTION_MAX_TOKENS = 48  # the package's per-option cap
MIN_OPTION_BUDGET, MIN_OPTION_TOKENS, MIN_HEADER_TOKENS = 16, 4, 8
TEMP_MIN, TEMP_MAX = 0.5, 5.0  # calibration temperatures outside are clamped (the package's range)
MAX_QUESTIONS = 64  # every question is one more encoder row per item
MAX_OPTIONS = 1024
# A text is cut to this many characters per token its part of a row can hold before it is
# tokenized: a token spans far fewer, so the tokens the row keeps are those of the whole text,
# and a huge text costs no more tokenizing than a row can use.
CHARS_PER_TOKEN = 32
DEFAULT_LABELS_INSTRUCTION = "Which category does this text belong to?"
LABELS_QUESTION_ID = "label"
NOUL_DEFAULTS = ("no, the statement does not hold", "yes, the statement holds")
_NOUL_LABELS_ERROR = "noul labels must map exactly 'false' and 'true' to distinct non-empty strings"


@dataclass(frozen=True, slots=True)
class Question:
    """One validated question: `criteria` is a label -> description dict (choice), a list of
    levels (score) or an optional true/false dict (noul)."""

    qid: str
    qtype: str
    instructions: str
    criteria: Any
    labels: tuple[str, str] = ("false", "true")


@dataclass(frozen=True, slots=True)
class Prefix:
    """A question's state-independent row prefix and where its option markers sit."""

    question: Question
    ids: list[int]
    markers: list[int]


@dataclass(frozen=True, slots=True)
class LayaConfig:
    """What `rl_agent_config.json` says about rows and calibration."""

    max_len: int
    head_max_len: int
    temperature: tuple[float, float, float]
    by_options: dict[str, float]

    @classmethod
    def from_file(cls, path: Path) -> LayaConfig:
        with path.open(encoding="utf-8") as fh:
            raw = json.load(fh)
        temps = raw.get("temperature", [1.0, 1.0, 1.0])
        if not isinstance(temps, list) or len(temps) != len(QTYPES):
            temps = [1.0, 1.0, 1.0]
        t0, t1, t2 = (clamp_temperature(t) for t in temps)
        by_options = raw.get("temperature_by_options") or {}
        return cls(
            max_len=int(raw.get("max_len", 512)),
            head_max_len=int(raw.get("head_max_len", 192)),
            temperature=(t0, t1, t2),
            by_options={str(k): clamp_temperature(v) for k, v in dict(by_options).items()},
        )

    def temperature_for(self, qtype: str, k: int) -> float:
        size = "2" if k <= 2 else "3-5" if k <= 5 else "6-10" if k <= 10 else "11+"
        return self.by_options.get(f"{qtype}:{size}", self.temperature[QTYPES[qtype]])


def clamp_temperature(t: Any) -> float:
    if isinstance(t, bool):
        return 1.0
    try:
        value = float(t)
    except (TypeError, ValueError, OverflowError):
        return 1.0
    return min(TEMP_MAX, max(TEMP_MIN, value)) if math.isfinite(value) else 1.0


def _token_id(tokenizer: Tokenizer, folder: Path, name: str) -> int:
    """A special token's id, from the tokenizer config's `<name>_token` (a string or an AddedToken)."""
    for file in ("tokenizer_config.json", "special_tokens_map.json"):
        path = folder / file
        if not path.is_file():
            continue
        token = token_content(json.loads(path.read_text(encoding="utf-8")).get(f"{name}_token"))
        if token is not None and tokenizer.token_to_id(token) is not None:
            return int(tokenizer.token_to_id(token))
    raise ValueError(f"Laya tokenizer in {folder} names no {name} token")


class LayaPrompts:
    """One checkpoint's row builder: its tokenizer (`tokenizer/`) and `rl_agent_config.json`."""

    def __init__(self, checkpoint: Path) -> None:
        self.config = LayaConfig.from_file(checkpoint / "rl_agent_config.json")
        folder = checkpoint / "tokenizer"
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self.cls_id = _token_id(self._tokenizer, folder, "cls")
        self.sep_id = _token_id(self._tokenizer, folder, "sep")
        self.mask_id = _token_id(self._tokenizer, folder, "mask")
        self.mask_token = str(self._tokenizer.id_to_token(self.mask_id))

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def prefixes(self, questions: Sequence[Question], max_len: int, head_max_len: int) -> list[Prefix]:
        """Each question's `[CLS] header [SEP] [MASK] opt ... [SEP]`, fitted to the head budget."""
        options = [render_options(q) for q in questions]
        header_chars = max(MIN_HEADER_TOKENS, head_max_len) * CHARS_PER_TOKEN
        option_chars = OPTION_MAX_TOKENS * CHARS_PER_TOKEN
        headers = [
            f"{q.qtype} question: {q.instructions[:header_chars].replace(self.mask_token, ' ')}"
            for q in questions
        ]
        header_ids = self._ids(headers)
        texts = [" " + o[:option_chars].replace(self.mask_token, " ") for opts in options for o in opts]
        option_ids = iter(self._ids(texts))
        found = []
        for q, head, opts in zip(questions, header_ids, options, strict=True):
            marked = [[self.mask_id, *next(option_ids)[:OPTION_MAX_TOKENS]] for _ in opts]
            budget = head_max_len - sum(map(len, marked))
            if budget < MIN_OPTION_BUDGET:  # too many options: every option is cut to a share
                per = max(MIN_OPTION_TOKENS, (head_max_len - MIN_OPTION_BUDGET) // max(1, len(marked)))
                marked = [o[:per] for o in marked]
                budget = head_max_len - sum(map(len, marked))
            ids = [self.cls_id, *head[: max(MIN_HEADER_TOKENS, budget)], self.sep_id]
            markers = []
            for o in marked:
                markers.append(len(ids))
                ids.extend(o)
            ids.append(self.sep_id)
            if markers[-1] >= max_len:
                raise InvalidInput(
                    f"question {q.qid!r}: its options do not all fit in max_len={max_len} "
                    f"with head_max_len={head_max_len}; use fewer or shorter options"
                )
            found.append(Prefix(q, ids, markers))
        return found

    def rows(self, states: Sequence[tuple[str, bool]], prefixes: Sequence[Prefix], max_len: int) -> Encoded:
        """One row per (state, question), state-major; `aux` is the question type + 1 at each marker.
        A state given as a list of turns (its flag set) keeps its end when cut."""
        chars = max_len * CHARS_PER_TOKEN
        cut = [text[-chars:] if from_end else text[:chars] for text, from_end in states]
        state_ids = self._ids([text.replace(self.mask_token, " ") for text in cut])
        rows, aux = [], []
        for ids, (_, from_end) in zip(state_ids, states, strict=True):
            for prefix in prefixes:
                room = max(0, max_len - len(prefix.ids) - 1)
                kept = ids[max(0, len(ids) - room) :] if from_end else ids[:room]
                row = [*prefix.ids, *kept, self.sep_id][:max_len]
                marks = np.zeros(len(row), np.int32)
                marks[prefix.markers] = QTYPES[prefix.question.qtype] + 1
                rows.append(np.asarray(row, np.int32))
                aux.append(marks)
        lengths = np.fromiter(map(len, rows), np.int32, len(rows))
        offsets = np.zeros(len(rows) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate(rows) if rows else np.zeros(0, np.int32)
        flat_aux = np.concatenate(aux) if aux else np.zeros(0, np.int32)
        return Encoded(offsets, flat, None, int(offsets[-1]), aux=flat_aux)


def render_criterion(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def render_options(q: Question) -> list[str]:
    """Option texts in marker order; a noul question is always [false, true]."""
    if q.qtype == "choice":
        return [k if v is None or v == "" else f"{k}: {render_criterion(v)}" for k, v in q.criteria.items()]
    if q.qtype == "score":
        return [f"level {i}: {render_criterion(c)}" for i, c in enumerate(q.criteria)]
    crit = q.criteria or {}
    return [
        f"{label}: {render_criterion(crit[key]) if crit.get(key) not in (None, '') else default}"
        for label, key, default in zip(q.labels, ("false", "true"), NOUL_DEFAULTS, strict=True)
    ]


def serialize_state(item: Any, family: str = "Laya") -> tuple[str, bool]:
    """An item's state text and whether it keeps its end when cut: `text`, or `metadata.state`
    (a string, a JSON object, or a list of turns, newest last). `family` names the model in errors."""
    metadata = item.metadata or {}
    if ("state" in metadata) == (item.text is not None):
        raise InvalidInput(
            f"{family} items need a state: text, or metadata.state (a string, object or list), not both"
        )
    if "state" not in metadata:
        return item.text, False
    state = metadata["state"]
    if isinstance(state, str):
        return state, False
    if not isinstance(state, Mapping | list):
        raise InvalidInput(f"{family} metadata.state must be a string, a JSON object or a list of turns")
    try:
        return json.dumps(state, ensure_ascii=False), isinstance(state, list)
    except (TypeError, ValueError) as exc:  # msgpack can carry what JSON cannot write
        raise InvalidInput(f"{family} metadata.state must be JSON-serializable") from exc


def decode_answer(q: Question, logits: np.ndarray, config: LayaConfig) -> dict[str, Any]:
    """One question's typed answer from its marker logits."""
    p = probabilities(logits, q.qtype, config)
    k = len(p)
    if q.qtype == "noul":
        p_true = float(p[1])
        return {
            "type": "noul",
            "noul": p_true,
            "answer": bool(p[1] > p[0]),
            "confidence": max(p_true, 1.0 - p_true),
        }
    confidence = entropy_confidence(p)
    if q.qtype == "choice":
        keys = list(q.criteria)
        return {
            "type": "choice",
            "choice": keys[int(p.argmax())],
            "probabilities": {key: float(v) for key, v in zip(keys, p, strict=True)},
            "confidence": confidence,
        }
    return {
        "type": "score",
        "score": float((np.arange(k) * p).sum()),
        "legend": {str(i): render_criterion(c) for i, c in enumerate(q.criteria)},
        "probabilities": {str(i): float(v) for i, v in enumerate(p)},
        "confidence": confidence,
    }


def probabilities(logits: np.ndarray, qtype: str, config: LayaConfig) -> np.ndarray:
    """The temperature-scaled softmax over one question's options (float32, as the package)."""
    z = np.asarray(logits, np.float32).reshape(-1) / config.temperature_for(qtype, len(logits))
    e = np.exp(z - z.max())
    return e / e.sum()


def entropy_confidence(p: np.ndarray) -> float:
    """1 - H(p) / log(k): how concentrated the distribution is (1.0 for a single option)."""
    k = len(p)
    if k < 2:
        return 1.0
    ent = -float((p * np.log(np.clip(p, 1e-12, 1.0))).sum())
    return min(1.0, max(0.0, 1.0 - ent / math.log(k)))


def ranked_labels(
    labels: Sequence[str], logits: np.ndarray, config: LayaConfig, threshold: float
) -> list[dict]:
    """Labels mode: every label at or above `threshold` with its probability, best first."""
    p = probabilities(logits, "choice", config)
    found = [
        {"label": label, "score": float(s)} for label, s in zip(labels, p, strict=True) if s >= threshold
    ]
    return sorted(found, key=lambda c: c["score"], reverse=True)
