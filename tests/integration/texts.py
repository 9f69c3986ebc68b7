"""Deterministic test texts and the closeness check every integration test uses."""

from __future__ import annotations

import random

import numpy as np

WORDS = [
    "protein",
    "cell",
    "gene",
    "cancer",
    "patients",
    "study",
    "results",
    "treatment",
    "risk",
    "increased",
    "mice",
    "human",
    "expression",
    "levels",
    "analysis",
    "effect",
    "role",
    "disease",
    "clinical",
    "response",
]


def random_texts(
    n: int, min_words: int, max_words: int | None = None, *, seed: int, numbered: bool = False
) -> list[str]:
    """`n` texts of `min_words`..`max_words` words; `numbered` makes every text distinct."""
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words or min_words)))
        texts.append(f"{i} {words}" if numbered else words)
    return texts


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """The issue's bar for float32: cosine >= 0.99999 and max |delta| <= 1e-5, row by row."""
    got, want = np.atleast_2d(got), np.atleast_2d(want)
    assert got.shape == want.shape
    cosine = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    assert cosine.min() >= 0.99999
    assert np.abs(got - want).max() <= 1e-5
