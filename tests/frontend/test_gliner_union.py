"""GLiNER unions' composition (windows, union, name propagation) and their members' settings."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from sie.frontend.gliner_union import Span, compose, propagated, union_spans, word_windows
from sie.gliner_union import UnionOptions, parse_members
from tests.tiny_models.gliner_union import SECOND_OPTIONS

WORD = re.compile(r"\w+(?:[-_]\w+)*|\S")


def test_propagation_marks_names_elsewhere() -> None:
    text = "Ann Lee met Lee. Leeds is not Lee, and Ann-Marie is Ann."
    spans = [Span(0, 7, "person", 0.9), Span(12, 15, "person", 0.7), Span(17, 22, "location", 0.8)]
    added = propagated(text, spans, "person", 3)
    # "Lee" (best 0.9) and "Ann" (0.9) at their other whole-word occurrences, none inside a span.
    assert [(text[s.start : s.end], s.start, s.score) for s in added] == [
        ("Ann", 39, 0.9),
        ("Ann", 52, 0.9),
        ("Lee", 30, 0.9),
    ]
    assert propagated(text, spans, "person", 4) == []  # names of fewer letters are not taken


def test_union_keeps_the_best_of_one_span_and_drops_below_the_floor() -> None:
    first = [Span(0, 3, "person", 0.7), Span(5, 9, "city", 0.55)]
    second = [Span(0, 3, "person", 0.8), Span(0, 3, "city", 0.65), Span(1, 3, "person", 0.9)]
    assert union_spans([first, second], 0.6) == [
        Span(0, 3, "person", 0.8),
        Span(0, 3, "city", 0.65),
        Span(1, 3, "person", 0.9),
    ]
    entities = compose("Bob in Rome", [first, second], UnionOptions(score_floor=0.6))
    assert [(e["text"], e["label"]) for e in entities] == [
        ("Bob", "person"),
        ("Bob", "city"),
        ("ob", "person"),
    ]


@pytest.mark.parametrize(
    ("words", "size", "overlap", "expected"),
    [
        (5, 5, 1, [(0, 5)]),
        (10, 4, 1, [(0, 4), (3, 7), (6, 10)]),
        (7, 4, 2, [(0, 4), (2, 6), (4, 7)]),
    ],
)
def test_windows_share_words(
    words: int, size: int, overlap: int, expected: Sequence[tuple[int, int]]
) -> None:
    text = " ".join(f"w{i}" for i in range(words))
    spans = [m.span() for m in WORD.finditer(text)]
    got = word_windows(text, size, overlap)
    if len(expected) == 1:
        assert got == [(0, len(text))]
    else:
        assert got == [(spans[a][0], spans[b - 1][1]) for a, b in expected]


@pytest.mark.parametrize(
    ("members", "fragment"),
    [
        ([], "at least one"),
        ([{"model": "numind/NuNER_Zero"}], "full commit SHA"),
        ([{"model": "numind/NuNER_Zero", "revision": "main"}], "full commit SHA"),
        ([{"path": "/x", "options": {"max_width": 3}}], "unsupported option"),
        ([{"path": "/x", "model": "a/b", "revision": "0" * 40}], "by model"),
        ([{"path": "/x", "options": {"threshold": 2}}], "threshold"),
    ],
)
def test_bad_members_are_refused(members: list[Any], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        parse_members(members)


def test_members_keep_their_settings() -> None:
    (member,) = parse_members([{"path": "/x", "options": {**SECOND_OPTIONS, "batch_size": 8}}])
    assert member.merge_adjacent_entities and member.threshold == 0.5 and member.flat_ner
