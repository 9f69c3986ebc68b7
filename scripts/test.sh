#!/usr/bin/env bash
# Install everything from scratch, then lint and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
.venv/bin/python -m ruff check sie tests scripts
exec .venv/bin/python -m pytest "$@"
