"""SIE's own SMVE encodings of fixed token matrices, written as the golden file our tests compare with.

    /opt/sie-peer/bin/python scripts/golden_smve_sie.py [tests/golden/smve_sie.json]

Run it with the Python of an environment that has sie-server 0.10.1 installed (`pip install
sie-server==0.10.1` in a Python 3.12 venv); it imports nothing of ours. The token matrices are
drawn from a fixed seed and stored in the file beside SIE's sparse encodings (`SmvePostprocessor`
of `sie_server.core.postprocessor`, through its public `transform`, on the CPU), one case per
group of settings, queries and documents each.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from sie_server.core.postprocessor import SmveConfig, SmvePostprocessor

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden" / "smve_sie.json"
DIM = 16
LENGTHS = (5, 9, 1, 0)  # tokens per item; an item without tokens encodes to an empty vector
CASES: dict[str, dict[str, Any]] = {
    # TopK's published width and k (Iso-ModernColBERT's smve_config): the anchors SIE draws.
    "published": {"width": 65536, "k": 32},
    "repetitions": {"width": 512, "k": 6, "num_repetitions": 3, "seed": 5},
    "max_nonzeros": {"width": 256, "k": 8, "num_repetitions": 2, "max_nonzeros": 10},
    "k_is_width": {"width": 4, "k": 4, "seed": 0},
}


def token_matrices() -> list[np.ndarray]:
    rng = np.random.default_rng(2026)
    items = []
    for n in LENGTHS:
        tokens = rng.normal(size=(n, DIM)).astype(np.float32)
        items.append(tokens / np.maximum(np.linalg.norm(tokens, axis=1, keepdims=True), 1e-12))
    return items


def encode(items: list[np.ndarray], settings: dict[str, Any], is_query: bool) -> list[dict[str, list[Any]]]:
    postprocessor = SmvePostprocessor(token_dim=DIM, config=SmveConfig(**settings), device="cpu")
    output = SimpleNamespace(multivector=items, sparse=None)
    postprocessor.transform(output, is_query=is_query)  # type: ignore[arg-type]
    return [{"indices": v.indices.tolist(), "values": v.values.tolist()} for v in output.sparse]


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else GOLDEN
    items = token_matrices()
    golden = {
        "source": f"sie-server {version('sie-server')}, sie_server.core.postprocessor.SmvePostprocessor",
        "numpy": np.__version__,
        "tokens": [item.tolist() for item in items],
        "cases": {
            name: {
                "settings": settings,
                "query": encode(items, settings, is_query=True),
                "document": encode(items, settings, is_query=False),
            }
            for name, settings in CASES.items()
        },
    }
    out.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
