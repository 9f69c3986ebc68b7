"""SMVE: equal to a literal token-by-token transcription of the algorithm and to SIE 0.10.1's own
encodings, batch-independent, ranks like MaxSim, and rejects bad parameters with InvalidInput."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.colbert import maxsim
from sie.frontend.smve import SmveParams, encode, smve_params

DIM = 32
SIE_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "smve_sie.json"


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    unit_rows: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit_rows


def reference(points: np.ndarray, *, is_query: bool, p: SmveParams) -> dict[int, float]:
    """The algorithm for one item, token by token: {dimension: value}, zeros left out."""
    sums: dict[int, float] = defaultdict(float)
    counts: dict[int, int] = defaultdict(int)
    for rep in range(p.num_repetitions):
        anchors = np.random.default_rng(p.seed + rep).standard_normal((points.shape[1], p.width), np.float32)
        anchors /= np.linalg.norm(anchors, axis=0)
        for token in points:
            projections = token @ anchors
            for anchor in np.argsort(-projections, kind="stable")[: p.k]:
                sums[rep * p.width + int(anchor)] += float(projections[anchor])
                counts[rep * p.width + int(anchor)] += int(projections[anchor] != 0)
    pooled = {d: v if is_query else v / max(counts[d], 1) for d, v in sums.items()}
    kept = {d: v for d, v in pooled.items() if v != 0}
    if p.max_nonzeros is not None:
        kept = dict(sorted(kept.items(), key=lambda dv: -abs(dv[1]))[: p.max_nonzeros])
    return kept


def as_dict(indices: np.ndarray, values: np.ndarray) -> dict[int, float]:
    assert indices.dtype == np.int32 and values.dtype == np.float32
    assert (np.diff(indices) > 0).all()  # ascending, no repeats
    return dict(zip(indices.tolist(), values.tolist(), strict=True))


def sparse_dot(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    common, ia, ib = np.intersect1d(a[0], b[0], return_indices=True)
    return float(a[1][ia] @ b[1][ib]) if len(common) else 0.0


SETTINGS = {
    "published": SmveParams(width=65536, k=32),
    "repetitions": SmveParams(width=300, k=5, num_repetitions=3, seed=9),
    "max_nonzeros": SmveParams(width=128, k=8, num_repetitions=2, max_nonzeros=12),
}


@pytest.mark.parametrize("name", SETTINGS)
@pytest.mark.parametrize("is_query", [True, False])
def test_equals_literal_algorithm(name: str, is_query: bool) -> None:
    rng = np.random.default_rng(1)
    items = [unit(rng, n) for n in (7, 1, 20, 0, 3)]
    params = SETTINGS[name]
    got = encode(items, is_query=is_query, params=params)
    assert len(got) == len(items)
    for item, (indices, values) in zip(items, got, strict=True):
        want = reference(item, is_query=is_query, p=params)
        have = as_dict(indices, values)
        assert have.keys() == want.keys()
        np.testing.assert_allclose([have[d] for d in want], list(want.values()), rtol=1e-5, atol=1e-6)
        assert all(0 <= d < params.output_dim for d in have)


@pytest.mark.parametrize("name", json.loads(SIE_GOLDEN.read_text())["cases"])
@pytest.mark.parametrize("kind", ["query", "document"])
def test_equals_sie_servers_own_encodings(name: str, kind: str) -> None:
    """SIE 0.10.1's SmvePostprocessor on fixed tokens (scripts/golden_smve_sie.py wrote them): the
    same anchors, so the same dimensions, and values a few ulps apart at most."""
    golden = json.loads(SIE_GOLDEN.read_text())
    items = [np.asarray(tokens, np.float32).reshape(-1, 16) for tokens in golden["tokens"]]
    case = golden["cases"][name]
    got = encode(items, is_query=kind == "query", params=SmveParams(**case["settings"]))
    for (indices, values), want in zip(got, case[kind], strict=True):
        assert indices.tolist() == want["indices"]
        np.testing.assert_allclose(values, np.asarray(want["values"], np.float32), rtol=1e-5, atol=1e-6)
    assert any(want["indices"] for want in case[kind])


def test_batch_equals_single() -> None:
    rng = np.random.default_rng(2)
    items = [unit(rng, int(n)) for n in rng.integers(0, 40, 12)]
    params = SmveParams(width=2048, k=16, num_repetitions=2)
    for is_query in (True, False):
        batch = encode(items, is_query=is_query, params=params)
        for item, (indices, values) in zip(items, batch, strict=True):
            [(one_indices, one_values)] = encode([item], is_query=is_query, params=params)
            np.testing.assert_array_equal(indices, one_indices)
            # The projection's matmul may block differently for other rows beside: an ulp at most.
            np.testing.assert_allclose(values, one_values, rtol=1e-6, atol=0)


def test_edge_items() -> None:
    params = SmveParams(width=64, k=4)
    assert encode([], is_query=True, params=params) == []
    [(indices, values)] = encode([np.zeros((0, DIM), np.float32)], is_query=False, params=params)
    assert indices.shape == values.shape == (0,)
    [(indices, values)] = encode([unit(np.random.default_rng(3), 1)], is_query=True, params=params)
    assert len(indices) == 4  # one token keeps exactly k dimensions
    with pytest.raises(ValueError, match="one dim"):
        encode([np.zeros((2, 4), np.float32), np.zeros((2, 5), np.float32)], is_query=True, params=params)


def test_dot_products_rank_documents_like_maxsim() -> None:
    # Queries drawn from a document's own tokens (plus noise): SMVE's first candidate is MaxSim's.
    rng = np.random.default_rng(4)
    docs = [unit(rng, int(rng.integers(20, 60))) for _ in range(40)]
    queries = []
    for i in range(0, 40, 4):
        picked = docs[i][rng.choice(len(docs[i]), 8, replace=False)] + 0.3 * unit(rng, 8)
        queries.append(picked / np.linalg.norm(picked, axis=1, keepdims=True))
    params = SmveParams()
    encoded_docs = encode(docs, is_query=False, params=params)
    for query, owner in zip(encode(queries, is_query=True, params=params), range(0, 40, 4), strict=True):
        scores = [sparse_dot(query, doc) for doc in encoded_docs]
        assert int(np.argmax(scores)) == owner
    assert int(np.argmax(maxsim(queries[0], docs))) == 0


def test_params_defaults_and_merge() -> None:
    assert smve_params(None, None, {"width": 8, "k": 2}) is None  # settings alone never turn it on
    assert smve_params({}, None) == SmveParams(width=65536, k=32, num_repetitions=1, seed=42)
    merged = smve_params({"k": 4}, {"num_repetitions": 2}, {"width": 1024, "k": 16})
    assert merged == SmveParams(width=1024, k=4, num_repetitions=2)
    assert merged.output_dim == 2048


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"width": 0}, "width"),
        ({"k": True}, "k"),
        ({"k": 9, "width": 8}, "at most its width"),
        ({"num_repetitions": 17}, "num_repetitions"),
        ({"max_nonzeros": 0}, "max_nonzeros"),
        ({"bandwidth": 3}, "Unknown options.smve keys"),
        ([1, 2], "object or null"),
    ],
)
def test_params_validation(options: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        smve_params(options, None)


def test_too_many_anchor_values_is_invalid_input() -> None:
    params = SmveParams(width=1 << 18, k=1, num_repetitions=16)
    with pytest.raises(InvalidInput, match="anchor values"):
        encode([unit(np.random.default_rng(5), 2, dim=128)], is_query=True, params=params)
