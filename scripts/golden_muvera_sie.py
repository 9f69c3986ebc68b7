"""SIE's own MUVERA encodings of fixed token matrices, written as the golden file our tests compare with.

    /opt/sie-peer/bin/python scripts/golden_muvera_sie.py [tests/golden/muvera_sie.json]

Run it with the Python of an environment that has sie-server 0.10.1 installed (`pip install
sie-server==0.10.1` in a Python 3.12 venv); it imports nothing of ours. The token matrices are
drawn from a fixed seed and stored in the file beside SIE's encodings (`MuveraPostprocessor` of
`sie_server.core.postprocessor`, through its public `transform`), one case per group of settings,
queries and documents each.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from sie_server.core.postprocessor import MuveraConfig, MuveraPostprocessor

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "muvera_sie.json"
DIM = 16
LENGTHS = (5, 9, 1, 0)  # tokens per item; an item without tokens encodes to zeros
CASES: dict[str, dict[str, Any]] = {
    # The paper's repetitions and partitions, with a small Count Sketch so the file stays small.
    "paper_reduced": {"num_repetitions": 40, "num_simhash_projections": 6, "final_projection_dim": 256},
    "count_sketch": {
        "num_repetitions": 4,
        "num_simhash_projections": 3,
        "final_projection_dim": 96,
        "seed": 3,
    },
    "ams_projection": {
        "num_repetitions": 3,
        "num_simhash_projections": 2,
        "projection_dim": 4,
        "final_projection_dim": None,
        "seed": 7,
    },
    "centered": {
        "num_repetitions": 2,
        "num_simhash_projections": 3,
        "final_projection_dim": 64,
        "center_tokens": True,
    },
    # A final dimension not below the concatenation's (2 x 4 x 16 = 128): SIE skips the sketch.
    "sketch_skipped": {"num_repetitions": 2, "num_simhash_projections": 2, "final_projection_dim": 10240},
    "one_partition": {"num_repetitions": 2, "num_simhash_projections": 0, "final_projection_dim": None},
}


def token_matrices() -> list[np.ndarray]:
    rng = np.random.default_rng(2024)
    items = []
    for n in LENGTHS:
        tokens = rng.normal(size=(n, DIM)).astype(np.float32)
        items.append(tokens / np.maximum(np.linalg.norm(tokens, axis=1, keepdims=True), 1e-12))
    return items


def encode(items: list[np.ndarray], settings: dict[str, Any], is_query: bool) -> np.ndarray:
    postprocessor = MuveraPostprocessor(token_dim=DIM, config=MuveraConfig(**settings))
    output = SimpleNamespace(multivector=items, dense=None, dense_dim=None)
    postprocessor.transform(output, is_query=is_query)  # type: ignore[arg-type]
    return np.asarray(output.dense, np.float32)


def main(argv: list[str]) -> int:
    out = (
        Path(argv[1])
        if len(argv) > 1
        else Path(__file__).resolve().parents[1] / "tests/golden/muvera_sie.json"
    )
    items = token_matrices()
    golden = {
        "source": f"sie-server {version('sie-server')}, sie_server.core.postprocessor.MuveraPostprocessor",
        "numpy": np.__version__,
        "tokens": [item.tolist() for item in items],
        "cases": {
            name: {
                "settings": settings,
                "query": encode(items, settings, is_query=True).tolist(),
                "document": encode(items, settings, is_query=False).tolist(),
            }
            for name, settings in CASES.items()
        },
    }
    out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
