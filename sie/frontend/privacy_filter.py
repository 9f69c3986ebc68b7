"""OpenAI's privacy filter: per-token label log-probabilities -> character spans, by constrained Viterbi.

The model tags every token with one of 33 labels: background `O`, or `B-`, `I-`, `E-`, `S-` (begin,
inside, end, single) of eight privacy categories. The labels are decoded jointly, as the model's own
runtime (OPF) decodes them: the best-scoring path among those whose tags form whole spans (a span is
`S`, or `B` then `I`s then `E`, of one category), scored by the tokens' log-probabilities plus six
calibrated transition biases (`viterbi_calibration.json`, shipped with the checkpoint; zeros when it
is absent). `span_entry_bias` shifts the background-to-span bias per request: above 0 finds more
spans, below 0 fewer.

Long texts are read in overlapping windows. The model attends `sliding_window` tokens to each side
in each of its layers, so a token's output depends on at most `layers * sliding_window` tokens each
side; a window that holds that much context around its core gives the core's tokens exactly what
one forward over the whole text would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sie.frontend.model_files import read_json_object

BACKGROUND = "O"
SPAN_TAGS = ("B", "I", "E", "S")
BIAS_KEYS = (
    "transition_bias_background_stay",
    "transition_bias_background_to_start",
    "transition_bias_inside_to_continue",
    "transition_bias_inside_to_end",
    "transition_bias_end_to_background",
    "transition_bias_end_to_start",
)
CALIBRATION_FILE = "viterbi_calibration.json"
MAX_SPAN_ENTRY_BIAS = 10.0
DEFAULT_WINDOW_TOKENS = 4096
MAX_BIAS = 1e300  # a calibrated bias is a few units; anything near a float's range is damage


@dataclass(frozen=True, slots=True)
class LabelSpace:
    """Per label id: its tag (None for background) and its category (None for background)."""

    tags: tuple[str | None, ...]
    categories: tuple[str | None, ...]

    @classmethod
    def from_id2label(cls, id2label: dict[int, str]) -> LabelSpace:
        if sorted(id2label) != list(range(len(id2label))):
            raise ValueError("config.json's id2label must number its labels 0..n-1")
        tags: list[str | None] = []
        categories: list[str | None] = []
        for index in range(len(id2label)):
            name = id2label[index]
            tag, _, category = name.partition("-")
            if name == BACKGROUND:
                tags.append(None)
                categories.append(None)
            elif tag in SPAN_TAGS and category:
                tags.append(tag)
                categories.append(category)
            else:
                raise ValueError(f"label {name!r} is neither {BACKGROUND!r} nor B-/I-/E-/S- of a category")
        if None not in tags:
            raise ValueError(f"the labels have no background label {BACKGROUND!r}")
        return cls(tuple(tags), tuple(categories))

    @property
    def category_names(self) -> list[str]:
        return sorted({category for category in self.categories if category is not None})


@dataclass(frozen=True, slots=True)
class Transitions:
    """Viterbi's score tables: start[c], end[c] and step[previous, next]; -inf where not allowed."""

    start: np.ndarray
    end: np.ndarray
    step: np.ndarray


def transitions(space: LabelSpace, biases: dict[str, float]) -> Transitions:
    n = len(space.tags)
    start = np.full(n, -np.inf)
    end = np.full(n, -np.inf)
    step = np.full((n, n), -np.inf)
    for label, tag in enumerate(space.tags):
        if tag in (None, "B", "S"):
            start[label] = 0.0
        if tag in (None, "E", "S"):
            end[label] = 0.0
        for following in range(n):
            bias = _step_bias(space, label, following, biases)
            if bias is not None:
                step[label, following] = bias
    return Transitions(start, end, step)


def _step_bias(space: LabelSpace, previous: int, following: int, biases: dict[str, float]) -> float | None:
    """The bias of moving from one label to the next, or None where no whole-span path does."""
    tag, next_tag = space.tags[previous], space.tags[following]
    opens = next_tag in ("B", "S")
    if tag in ("B", "I"):  # inside a span: it goes on or ends, in its own category
        if space.categories[following] != space.categories[previous]:
            return None
        if next_tag == "I":
            return biases["transition_bias_inside_to_continue"]
        if next_tag == "E":
            return biases["transition_bias_inside_to_end"]
        return None
    if tag is None:  # background
        if next_tag is None:
            return biases["transition_bias_background_stay"]
        return biases["transition_bias_background_to_start"] if opens else None
    # after a span's last token (E or S)
    if next_tag is None:
        return biases["transition_bias_end_to_background"]
    return biases["transition_bias_end_to_start"] if opens else None


def viterbi(logprobs: np.ndarray, table: Transitions) -> np.ndarray:
    """The best allowed label path through logprobs [n, labels] (ties: the lowest label id)."""
    n = len(logprobs)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    columns = np.arange(logprobs.shape[1])
    scores = logprobs[0] + table.start
    back = np.empty((n - 1, logprobs.shape[1]), dtype=np.int64)
    for t in range(1, n):
        candidates = scores[:, None] + table.step
        back[t - 1] = best = candidates.argmax(axis=0)
        scores = candidates[best, columns] + logprobs[t]
    path = np.empty(n, dtype=np.int64)
    path[-1] = int(np.argmax(scores + table.end))
    for t in range(n - 2, -1, -1):
        path[t] = back[t, path[t + 1]]
    return path


def log_softmax(logits: np.ndarray) -> np.ndarray:
    values = np.asarray(logits, dtype=np.float64)
    shifted = values - values.max(axis=-1, keepdims=True)
    result: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def entities(
    text: str,
    offsets: np.ndarray,
    logprobs: np.ndarray,
    path: np.ndarray,
    space: LabelSpace,
    *,
    trim_whitespace: bool,
    wanted: set[str] | None,
) -> list[dict[str, Any]]:
    """The path's spans as entities: a span's text runs from its first token's start to its last
    token's end (less surrounding whitespace when asked), its score is its tokens' mean probability
    of the labels the path gave them."""
    found: list[dict[str, Any]] = []
    first = 0
    for t, label in enumerate(path.tolist()):
        tag = space.tags[label]
        if tag in ("B", "S"):
            first = t
        if tag not in ("E", "S"):
            continue
        category = space.categories[label]
        if category is None or (wanted is not None and category not in wanted):
            continue
        start, end = int(offsets[first, 0]), int(offsets[t, 1])
        if trim_whitespace:
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
        if start >= end:
            continue
        chosen = logprobs[np.arange(first, t + 1), path[first : t + 1]]
        score = float(np.exp(chosen).mean())
        found.append({"text": text[start:end], "label": category, "score": score, "start": start, "end": end})
    return found


@dataclass(frozen=True, slots=True)
class Window:
    """Tokens [start, stop) of a text go to the device; the outputs of [core_start, core_stop) are kept."""

    start: int
    stop: int
    core_start: int
    core_stop: int


def plan_windows(n_tokens: int, window: int, margin: int) -> list[Window]:
    """Windows of at most `window` tokens whose cores tile the text, each core with `margin`
    tokens of context on both sides where the text has them."""
    if n_tokens == 0:
        return []
    if n_tokens <= window:
        return [Window(0, n_tokens, 0, n_tokens)]
    stride = window - 2 * margin
    if stride <= 0:
        raise ValueError(
            f"a window of {window} tokens leaves no core inside {margin} tokens of context each side"
        )
    planned = []
    for core_start in range(0, n_tokens, stride):
        core_stop = min(core_start + stride, n_tokens)
        planned.append(
            Window(max(0, core_start - margin), min(n_tokens, core_stop + margin), core_start, core_stop)
        )
    return planned


def stitch(windows: list[Window], outputs: list[np.ndarray]) -> np.ndarray:
    """One text's per-token rows from its windows' rows, each token's from the window it is core of."""
    parts = [
        rows[w.core_start - w.start : w.core_stop - w.start] for w, rows in zip(windows, outputs, strict=True)
    ]
    return np.concatenate(parts)


def context_margin(weights_dir: Path) -> int:
    """Tokens each side that can reach a token's output: the layers times the attention window."""
    config = read_json_object(weights_dir / "config.json")
    layers, reach = config.get("num_hidden_layers"), config.get("sliding_window")
    if not isinstance(layers, int) or not isinstance(reach, int) or layers <= 0 or reach <= 0:
        raise ValueError(f"{weights_dir}/config.json gives no num_hidden_layers and sliding_window")
    return layers * reach


def calibration_biases(weights_dir: Path, subdir: str) -> dict[str, float]:
    """The checkpoint's calibrated transition biases (`operating_points.default.biases` of
    viterbi_calibration.json, in `subdir` or at the folder's root); zeros without the file."""
    for folder in (weights_dir / subdir, weights_dir) if subdir else (weights_dir,):
        path = folder / CALIBRATION_FILE
        if path.is_file():
            return _read_biases(path)
    return dict.fromkeys(BIAS_KEYS, 0.0)


def _read_biases(path: Path) -> dict[str, float]:
    try:
        biases = json.loads(path.read_text(encoding="utf-8"))["operating_points"]["default"]["biases"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} has no operating_points.default.biases: {exc}") from None
    if not isinstance(biases, dict) or set(biases) != set(BIAS_KEYS):
        raise ValueError(f"{path}: the biases must be exactly {list(BIAS_KEYS)}")
    checked = {}
    for key in BIAS_KEYS:
        value = biases[key]
        # Compared, not converted: NaN compares false, and a JSON integer may not fit a float.
        if isinstance(value, bool) or not isinstance(value, int | float) or not abs(value) < MAX_BIAS:
            raise ValueError(f"{path}: {key} must be a finite number")
        checked[key] = float(value)
    return checked
