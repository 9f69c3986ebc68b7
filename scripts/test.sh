#!/usr/bin/env bash
# Install everything from scratch, then lint and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
.venv/bin/python -m ruff check sie tests scripts
# Test files run on SIE_TEST_WORKERS pytest-xdist workers (default 2), each file whole on one worker so
# its module fixtures (real servers) start once, and the files sharing a session server together
# (tests/conftest.py); `-n 0` after this script's arguments runs one process.
exec .venv/bin/python -m pytest -n "${SIE_TEST_WORKERS:-2}" --dist loadfile "$@"
