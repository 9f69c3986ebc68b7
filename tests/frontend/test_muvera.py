"""MUVERA: equal to a literal transcription of the spec's algorithm, ranks like MaxSim, is
deterministic across processes, and rejects bad parameters with InvalidInput."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sie.errors import InvalidInput
from sie.frontend.colbert import maxsim
from sie.frontend.muvera import MuveraParams, fde, muvera_params

DIM = 32


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    unit_rows: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit_rows


def corpus(seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """50 documents of 30-80 unit token vectors and 10 queries of 32, dim 32."""
    rng = np.random.default_rng(seed)
    docs = [unit(rng, int(rng.integers(30, 81))) for _ in range(50)]
    return docs, [unit(rng, 32) for _ in range(10)]


def reference_fde(points: np.ndarray, *, is_query: bool, p: MuveraParams) -> np.ndarray:
    """The spec's algorithm for one item, written out loop by loop (as sionic-ai/muvera-py does)."""
    d = points.shape[1]
    width, n_parts = p.projection_dim or d, 2**p.num_simhash_projections
    blocks = []
    for rep in range(p.num_repetitions):
        gaussian = np.random.default_rng(p.seed + rep).normal(0.0, 1.0, (d, p.num_simhash_projections))
        sketches = points @ gaussian.astype(np.float32)
        projected = points
        if p.projection_dim is not None:
            rng = np.random.default_rng(p.seed + rep)
            ams = np.zeros((d, width), np.float32)
            columns = rng.integers(0, width, size=d)  # drawn before the signs
            ams[np.arange(d), columns] = rng.choice([-1.0, 1.0], size=d)
            projected = points @ ams
        block = np.zeros((n_parts, width), np.float32)
        counts = np.zeros(n_parts)
        for token, sketch in enumerate(sketches):
            index = 0
            for value in sketch:
                index = (index << 1) + (int(value > 0) ^ (index & 1))
            block[index] += projected[token]
            counts[index] += 1
        if not is_query:
            block[counts > 0] /= counts[counts > 0, None]
        blocks.append(block.ravel())
    out = np.concatenate(blocks)
    if p.final_projection_dim is None or p.final_projection_dim >= len(out):  # no sketch, or no reduction
        return out
    rng = np.random.default_rng(p.seed)
    where = rng.integers(0, p.final_projection_dim, size=len(out))
    sign = rng.choice([-1.0, 1.0], size=len(out))
    sketched = np.zeros(p.final_projection_dim, np.float32)
    np.add.at(sketched, where, sign * out)
    return sketched


PARAMS = {
    "default": MuveraParams(),
    "ams_projection": MuveraParams(num_repetitions=5, projection_dim=8, final_projection_dim=512, seed=7),
    "no_count_sketch": MuveraParams(num_repetitions=3, num_simhash_projections=3, final_projection_dim=None),
    "one_partition": MuveraParams(num_repetitions=2, num_simhash_projections=0, final_projection_dim=64),
}


@pytest.mark.parametrize("name", PARAMS)
@pytest.mark.parametrize("is_query", [True, False])
def test_equals_literal_algorithm(name: str, is_query: bool) -> None:
    params = PARAMS[name]
    docs, queries = corpus()
    items = (queries if is_query else docs)[:6]
    got = fde(items, is_query=is_query, params=params)
    assert got.dtype == np.float32 and got.shape == (len(items), params.output_dim(DIM))
    want = np.stack([reference_fde(x, is_query=is_query, p=params) for x in items])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ranks_a, ranks_b = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def test_fde_dot_products_rank_documents_like_maxsim() -> None:
    """Threshold: two unrelated rankings of 50 documents have Spearman 0 +- 0.14 (1/sqrt(49)), so a
    mean of 0.5 over 10 queries is far out of chance (measured over seeds 0-4: means 0.61-0.72,
    per-query minima 0.50-0.61)."""
    docs, queries = corpus()
    params = MuveraParams()
    estimate = fde(queries, is_query=True, params=params) @ fde(docs, is_query=False, params=params).T
    exact = np.stack([maxsim(q, docs) for q in queries])
    correlations = [spearman(estimate[i], exact[i]) for i in range(len(queries))]
    assert np.mean(correlations) > 0.5 and min(correlations) > 0.3


def test_top1_agrees_with_maxsim_for_queries_drawn_from_documents() -> None:
    """Queries made of noisy copies of one document's tokens: MaxSim and the FDE both find it."""
    docs, _ = corpus()
    rng = np.random.default_rng(1)
    targets = rng.choice(len(docs), 10, replace=False)
    queries = []
    for t in targets:
        picked = docs[t][rng.choice(len(docs[t]), 32, replace=False)]
        noisy = picked + 0.05 * rng.normal(size=picked.shape).astype(np.float32)
        queries.append(noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
    params = MuveraParams()
    estimate = fde(queries, is_query=True, params=params) @ fde(docs, is_query=False, params=params).T
    exact = np.stack([maxsim(q, docs) for q in queries])
    np.testing.assert_array_equal(exact.argmax(axis=1), targets)
    np.testing.assert_array_equal(estimate.argmax(axis=1), targets)


def test_batch_equals_single() -> None:
    docs, queries = corpus()
    params = MuveraParams()
    for is_query, items in ((True, queries), (False, docs[:12])):
        batch = fde([*items, items[0]], is_query=is_query, params=params)
        singles = np.concatenate([fde([x], is_query=is_query, params=params) for x in items])
        np.testing.assert_allclose(batch[:-1], singles, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(batch[0], batch[-1])


def test_edge_items() -> None:
    params = MuveraParams(num_repetitions=2, final_projection_dim=16)
    out = fde(
        [np.zeros((0, DIM), np.float32), unit(np.random.default_rng(0), 3)], is_query=False, params=params
    )
    assert out.shape == (2, 16) and not out[0].any() and out[1].any()
    assert fde([], is_query=True, params=params).shape == (0, 16)
    with pytest.raises(ValueError, match="one dim"):
        fde([np.zeros((2, 4), np.float32), np.zeros((2, 5), np.float32)], is_query=True, params=params)
    with pytest.raises(InvalidInput, match="too large"):
        fde([np.zeros((1, 1024), np.float32)], is_query=True, params=MuveraParams(num_simhash_projections=10))


_CHILD = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    from sie.frontend.muvera import MuveraParams, fde
    rng = np.random.default_rng(5)
    items = [rng.normal(size=(int(n), 32)).astype(np.float32) for n in rng.integers(1, 60, 8)]
    for is_query in (True, False):
        out = fde(items, is_query=is_query, params=MuveraParams(projection_dim=None, seed=3))
        sys.stdout.write(hashlib.sha256(out.tobytes()).hexdigest() + "\\n")
    """
)


def test_deterministic_across_processes() -> None:
    runs = [
        subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60)
        for _ in range(2)
    ]
    assert runs[0].stdout == runs[1].stdout and len(runs[0].stdout.split()) == 2
    rng = np.random.default_rng(5)
    items = [rng.normal(size=(int(n), 32)).astype(np.float32) for n in rng.integers(1, 60, 8)]
    here = hashlib.sha256(fde(items, is_query=True, params=MuveraParams(seed=3)).tobytes()).hexdigest()
    assert runs[0].stdout.split()[0] == here


def test_params_defaults_and_merge() -> None:
    assert muvera_params(None, None) is None
    assert muvera_params({}, None) == MuveraParams(40, 6, None, 10240, 42)
    profile = {"num_repetitions": 20, "seed": 1}
    assert muvera_params(None, profile) == MuveraParams(num_repetitions=20, seed=1)
    merged = muvera_params({"seed": 9, "final_projection_dim": None, "projection_dim": 16}, profile)
    assert merged == MuveraParams(num_repetitions=20, seed=9, projection_dim=16, final_projection_dim=None)
    assert merged.output_dim(DIM) == 20 * 64 * 16


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_repetitions": "40"}, r"num_repetitions must be an integer in \[1, 256\], got '40'"),
        ({"num_repetitions": 0}, "num_repetitions must be an integer"),
        ({"num_repetitions": True}, "got True"),
        ({"num_simhash_projections": 17}, r"num_simhash_projections must be an integer in \[0, 16\]"),
        ({"num_simhash_projections": None}, "got None"),
        ({"projection_dim": 2.5}, "projection_dim must be an integer or null"),
        ({"final_projection_dim": -1}, "final_projection_dim must be an integer or null"),
        ({"seed": -3}, "seed must be an integer"),
        ({"normalize": True}, r"Unknown options.muvera keys: \['normalize'\]"),
        ([1, 2], "options.muvera must be an object or null, got list"),
        (True, "got bool"),
    ],
)
def test_params_validation(options: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        muvera_params(options, None)


def test_profile_params_are_validated_too() -> None:
    with pytest.raises(InvalidInput, match="the profile's muvera must be an object"):
        muvera_params(None, "yes")
    with pytest.raises(InvalidInput, match=r"the profile's muvera\.seed must be an integer"):
        muvera_params({"seed": 1}, {"seed": "x"})


def test_center_tokens_encodes_the_tokens_less_their_mean() -> None:
    rng = np.random.default_rng(11)
    items = [rng.standard_normal((n, 16)).astype(np.float32) + 3.0 for n in (1, 5, 17)]
    centered = [v - v.mean(axis=0, keepdims=True) for v in items]
    params = MuveraParams(num_repetitions=3, final_projection_dim=None)
    for is_query in (True, False):
        got = fde(items, is_query=is_query, params=replace(params, center_tokens=True))
        np.testing.assert_allclose(got, fde(centered, is_query=is_query, params=params), atol=1e-5)
        assert not np.allclose(got, fde(items, is_query=is_query, params=params))


def test_model_defaults_then_profile_then_request() -> None:
    defaults = {
        "num_repetitions": 40,
        "projection_dim": 8,
        "final_projection_dim": None,
        "center_tokens": True,
    }
    params = muvera_params({"num_repetitions": 5}, {}, defaults)
    assert params == MuveraParams(
        num_repetitions=5, projection_dim=8, final_projection_dim=None, center_tokens=True
    )
    assert muvera_params(None, None, defaults) is None  # defaults alone never turn MUVERA on
    with pytest.raises(InvalidInput, match="center_tokens"):
        muvera_params({"center_tokens": 1}, None)


SIE_GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "muvera_sie.json"


@pytest.mark.parametrize("name", json.loads(SIE_GOLDEN.read_text())["cases"])
@pytest.mark.parametrize("kind", ["query", "document"])
def test_equals_sie_servers_own_encodings(name: str, kind: str) -> None:
    """SIE 0.10.1's MuveraPostprocessor on fixed tokens (scripts/golden_muvera_sie.py wrote them)."""
    golden = json.loads(SIE_GOLDEN.read_text())
    items = [np.asarray(tokens, np.float32).reshape(-1, 16) for tokens in golden["tokens"]]
    case = golden["cases"][name]
    want = np.asarray(case[kind], np.float32)
    got = fde(items, is_query=kind == "query", params=MuveraParams(**case["settings"]))
    assert got.shape == want.shape
    # SIE adds in float32 token by token, ours in float64 per cell and rounds once: a few ulps apart.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert want.any()
