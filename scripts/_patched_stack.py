"""A benchmark stack with hypercorn's one-write patch (`sie/frontend/h11_writes.py`) on or off.

    STACK=_bare_stack|_app_stack H11_WRITES=1|0 hypercorn -w 2 -k uvloop _patched_stack:app

Served by `bench_h11_writes.py`; the stack's own variables (BARE_STACK_TOKENIZER, APP_STACK_MODELS)
apply as for `bench_overhead.py`.
"""

from __future__ import annotations

import importlib
import os

from sie.frontend import h11_writes

if os.environ.get("H11_WRITES") == "1":
    h11_writes.install()
else:
    h11_writes.install = lambda: False  # _app_stack installs it as a frontend does: not this time

app = importlib.import_module(os.environ["STACK"]).app
