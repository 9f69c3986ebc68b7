#!/usr/bin/env bash
# Install sie, then start it on its built-in default model (all-MiniLM-L6-v2) at 127.0.0.1:8080.
# Extra arguments go to `python -m sie serve` (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec .venv/bin/python -m sie serve "$@"
