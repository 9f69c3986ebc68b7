"""Dependency direction, checked in fresh interpreters so nothing else has been imported yet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    return set(result.stdout.split())


def test_batcher_does_not_import_torch() -> None:
    loaded = modules_after("import sie.gpu_proc.batcher")
    assert "sie.gpu_proc.batcher" in loaded
    assert not {"torch", "transformers"} & loaded


def test_adapters_and_runner_do_not_import_the_web_stack() -> None:
    # Touch AutoModel too: transformers imports its model code lazily, on first attribute access.
    loaded = modules_after(
        "import sie.gpu_proc.runner, sie.gpu_proc.adapters.dense, sie.gpu_proc.adapters\n"
        "import transformers\ntransformers.AutoModel, transformers.BertModel"
    )
    assert "torch" in loaded
    assert not {"starlette", "hypercorn", "sie.frontend"} & loaded
