"""The privacy filter's decoding: constrained Viterbi against an exhaustive search and a plain
reference, spans and their edges, the window plan, and the calibration file."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from sie.frontend.privacy_filter import (
    BIAS_KEYS,
    LabelSpace,
    calibration_biases,
    entities,
    log_softmax,
    plan_windows,
    transitions,
    viterbi,
)
from tests.tiny_models.privacy_filter import CALIBRATION, LABELS, best_path, path_score

SMALL_LABELS = ["O", "B-a", "I-a", "E-a", "S-a", "B-b", "I-b", "E-b", "S-b"]


def space_of(labels: list[str] | tuple[str, ...]) -> LabelSpace:
    return LabelSpace.from_id2label(dict(enumerate(labels)))


def random_biases(rng: np.random.Generator) -> dict[str, float]:
    return {
        key: float(value) for key, value in zip(BIAS_KEYS, rng.normal(0, 1.5, len(BIAS_KEYS)), strict=True)
    }


def random_logprobs(rng: np.random.Generator, n: int, labels: int, spread: float = 3.0) -> np.ndarray:
    return log_softmax(rng.normal(0, spread, (n, labels)))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_viterbi_finds_the_best_whole_span_path_by_exhaustive_search(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed * 10 + n)
    biases = random_biases(rng)
    logprobs = random_logprobs(rng, n, len(SMALL_LABELS))
    rows = logprobs.tolist()
    scored = (
        (path_score(list(path), rows, SMALL_LABELS, biases), path)
        for path in itertools.product(range(len(SMALL_LABELS)), repeat=n)
    )
    best_score, best = max(scored, key=lambda pair: pair[0])
    path = viterbi(logprobs, transitions(space_of(SMALL_LABELS), biases))
    assert tuple(path.tolist()) == best
    assert path_score(path.tolist(), rows, SMALL_LABELS, biases) == pytest.approx(best_score)


@pytest.mark.parametrize("seed", range(4))
def test_viterbi_matches_the_plain_reference_on_the_models_33_labels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    biases = random_biases(rng)
    logprobs = random_logprobs(rng, 60, len(LABELS), spread=2.0)
    path = viterbi(logprobs, transitions(space_of(LABELS), biases))
    assert path.tolist() == best_path(logprobs.tolist(), list(LABELS), biases)


def test_every_decoded_path_is_whole_spans() -> None:
    rng = np.random.default_rng(7)
    space = space_of(LABELS)
    for _ in range(20):
        path = viterbi(
            random_logprobs(rng, 40, len(LABELS), spread=6.0), transitions(space, random_biases(rng))
        )
        assert (
            path_score(path.tolist(), np.zeros((40, len(LABELS))).tolist(), list(LABELS), CALIBRATION)
            > -np.inf
        )


def test_span_entry_bias_moves_the_number_of_spans() -> None:
    rng = np.random.default_rng(3)
    space = space_of(LABELS)
    logits = rng.normal(0, 2.0, (200, len(LABELS)))
    logits[:, 0] += 4.0  # background most of the time, as in real text
    logprobs = log_softmax(logits)
    counts = []
    for entry in (-6.0, 0.0, 6.0):
        biases = dict(CALIBRATION, transition_bias_background_to_start=entry)
        path = viterbi(logprobs, transitions(space, biases))
        counts.append(sum(space.tags[label] in ("B", "S") for label in path.tolist()))
    assert counts[0] < counts[1] < counts[2]


def test_spans_trim_edge_whitespace_and_keep_only_wanted_categories() -> None:
    space = space_of(SMALL_LABELS)
    text = "call  Ann Lee now"
    # tokens: "call", " ", " Ann", " Lee", " now"; "  Ann Lee" is one span of a, " now" one of b
    offsets = np.array([[0, 4], [4, 5], [5, 9], [9, 13], [13, 17]])
    path = np.array([0, 1, 2, 3, 8])
    logprobs = np.log(np.full((5, len(SMALL_LABELS)), 0.5))
    found = entities(text, offsets, logprobs, path, space, trim_whitespace=True, wanted=None)
    assert [(e["label"], e["text"], e["start"], e["end"]) for e in found] == [
        ("a", "Ann Lee", 6, 13),
        ("b", "now", 14, 17),
    ]
    assert found[0]["score"] == pytest.approx(0.5)
    untrimmed = entities(text, offsets, logprobs, path, space, trim_whitespace=False, wanted={"b"})
    assert [(e["label"], e["text"]) for e in untrimmed] == [("b", " now")]


def test_a_whitespace_only_span_is_dropped() -> None:
    found = entities(
        "a  b",
        np.array([[0, 1], [1, 3], [3, 4]]),
        np.zeros((3, len(SMALL_LABELS))),
        np.array([0, 4, 0]),
        space_of(SMALL_LABELS),
        trim_whitespace=True,
        wanted=None,
    )
    assert found == []


@pytest.mark.parametrize("n_tokens", [1, 10, 11, 25, 97])
def test_window_cores_tile_the_text_with_their_context(n_tokens: int) -> None:
    window, margin = 10, 2
    planned = plan_windows(n_tokens, window, margin)
    covered = [t for w in planned for t in range(w.core_start, w.core_stop)]
    assert covered == list(range(n_tokens))
    for w in planned:
        assert 0 <= w.start <= w.core_start < w.core_stop <= w.stop <= n_tokens
        assert w.stop - w.start <= window
        assert w.core_start - w.start >= min(margin, w.core_start)
        assert w.stop - w.core_stop >= min(margin, n_tokens - w.core_stop)


def test_no_windows_for_an_empty_text_and_none_too_small_for_the_context() -> None:
    assert plan_windows(0, 10, 2) == []
    with pytest.raises(ValueError, match="no core"):
        plan_windows(30, 8, 4)


def test_label_spaces_that_are_not_bioes_are_refused() -> None:
    with pytest.raises(ValueError, match="neither"):
        space_of(["O", "B-PER", "X-PER"])
    with pytest.raises(ValueError, match="background"):
        space_of(["B-a", "E-a"])
    with pytest.raises(ValueError, match=r"0\.\.n-1"):
        LabelSpace.from_id2label({0: "O", 2: "S-a"})
    assert space_of(LABELS).category_names == sorted({label[2:] for label in LABELS[1:]})


def write_calibration(folder: Path, biases: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    artifact = {"operating_points": {"default": {"biases": biases}}}
    (folder / "viterbi_calibration.json").write_text(json.dumps(artifact))


def test_calibration_is_read_from_the_subfolder_then_the_root_else_zeros(tmp_path: Path) -> None:
    assert calibration_biases(tmp_path, "original") == dict.fromkeys(BIAS_KEYS, 0.0)
    write_calibration(tmp_path, dict(CALIBRATION, transition_bias_background_stay=9.0))
    assert calibration_biases(tmp_path, "original")["transition_bias_background_stay"] == 9.0
    write_calibration(tmp_path / "original", CALIBRATION)
    assert calibration_biases(tmp_path, "original") == CALIBRATION
    assert calibration_biases(tmp_path, "")["transition_bias_background_stay"] == 9.0


@pytest.mark.parametrize(
    "biases",
    [
        {key: 0.0 for key in BIAS_KEYS[:-1]},
        dict(CALIBRATION, extra=1.0),
        dict(CALIBRATION, transition_bias_end_to_start="high"),
        dict(CALIBRATION, transition_bias_end_to_start=float("inf")),
        [1, 2],
    ],
)
def test_a_damaged_calibration_is_an_error_naming_the_file(tmp_path: Path, biases: object) -> None:
    write_calibration(tmp_path / "original", biases)
    with pytest.raises(ValueError, match=r"viterbi_calibration\.json"):
        calibration_biases(tmp_path, "original")


def test_a_calibration_with_a_number_too_large_for_a_float_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "original"
    folder.mkdir()
    biases = ", ".join(f'"{key}": {"1" + "0" * 400 if i == 0 else "0.5"}' for i, key in enumerate(BIAS_KEYS))
    (folder / "viterbi_calibration.json").write_text(
        f'{{"operating_points": {{"default": {{"biases": {{{biases}}}}}}}}}'
    )
    with pytest.raises(ValueError, match="finite"):
        calibration_biases(tmp_path, "original")
