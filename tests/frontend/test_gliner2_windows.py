"""Long-text classification windows and their pooling, as SIE's GLiNER2 adapter defines them."""

from __future__ import annotations

import pytest

from sie.errors import InvalidInput
from sie.frontend.gliner2_windows import pool, ranked, windows

WORDS = [f"w{i}" for i in range(20)]


def test_a_text_that_fits_is_one_window() -> None:
    assert windows("a b c", 3) == ["a b c"]
    assert windows("", 3) == [""]


def test_windows_overlap_by_half_up_to_64_words() -> None:
    text = " ".join(WORDS) + "  "
    got = windows(text, 8)
    # 8 words a window; each starts at the last 4 (half of 8) of the one before; the last runs to the end.
    assert got == [
        " ".join(WORDS[0:8]) + " ",
        " ".join(WORDS[4:12]) + " ",
        " ".join(WORDS[8:16]) + " ",
        " ".join(WORDS[12:20]) + "  ",
    ]
    many = " ".join(f"x{i}" for i in range(300))
    assert [len(w.split()) for w in windows(many, 200)] == [200, 164]  # 64 shared, the rest new


def test_too_many_windows_are_refused() -> None:
    with pytest.raises(InvalidInput, match="at most 128 windows"):
        windows("a " * 300, 2)


def test_multi_label_takes_each_labels_best_window() -> None:
    found = [[("a", 0.6), ("b", 0.2)], [("b", 0.9)], [("a", 0.7)]]
    assert dict(pool(found, n_labels=3, multi_label=True, positive_label=None)) == {"a": 0.7, "b": 0.9}


def test_single_label_prefers_the_positive_label() -> None:
    found = [[("safe", 0.9)], [("unsafe", 0.6)], [("unsafe", 0.8)], [("safe", 0.99)]]
    assert pool(found, n_labels=2, multi_label=False, positive_label="unsafe") == [("unsafe", 0.8)]
    # No window takes it: with two labels, the least sure window is where it is likeliest.
    calm = [[("safe", 0.9)], [("safe", 0.55)], [("safe", 0.55)]]
    assert pool(calm, n_labels=2, multi_label=False, positive_label="unsafe") == [("safe", 0.55)]
    # With more labels, or none positive: the surest window (the earliest of a tie).
    assert pool(calm, n_labels=3, multi_label=False, positive_label="unsafe") == [("safe", 0.9)]
    assert pool([[("x", 0.5)], [("y", 0.5)]], n_labels=2, multi_label=False, positive_label=None) == [
        ("x", 0.5)
    ]


def test_ranked_keeps_those_at_the_threshold_best_first() -> None:
    assert ranked([("a", 0.2), ("b", 0.7), ("c", 0.5)], 0.5) == [
        {"label": "b", "score": 0.7},
        {"label": "c", "score": 0.5},
    ]
