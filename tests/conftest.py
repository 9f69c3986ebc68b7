"""Suite-wide hooks (see tests/strict_skips.py for the CI switch)."""

from __future__ import annotations

import importlib.util

pytest_plugins = ["tests.strict_skips"]

# Importing gliformer makes its bidirectional Qwen3 transformers' AutoModel for Qwen3Config in the
# whole process; its first import goes through the adapter's guard, so this process's other Qwen3
# tests build transformers' own model.
if importlib.util.find_spec("gliformer") is not None:
    from sie.gpu_proc.adapters.gliformer import import_gliformer

    import_gliformer()
