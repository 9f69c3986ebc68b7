#!/usr/bin/env bash
# The GPU kit, in one call on the lent GPU machine (after scripts/gpu/prepare.sh here):
#
#   device run, carry [".gpu-wheels"], command: bash scripts/gpu/run.sh
#
# installs the wheels from .gpu-wheels/ into /tmp/sie-site, builds random-weight models of real
# shapes, runs the CUDA tests, benchmarks the raw forward against sie over HTTP, and writes one JSON
# to $OUT/gpu-kit.json (scripts/gpu/bench_gpu.py says what is in it). `--cpu` runs the same steps
# here on the CPU with tiny models and this checkout's .venv, so the kit is tested before a GPU
# comes. Other arguments go to bench_gpu.py (--seconds, --clients, --frontends, --skip-tests).
# `--diagnose` (after `--cpu`, if any) runs scripts/gpu/diagnose.py instead: launch cost, metrics
# and py-spy stacks of every sie process under load, into $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
OUT="${OUT:-/tmp/sie-gpu-kit}"
mkdir -p "$OUT"
args=()
if [[ "${1:-}" == "--cpu" ]]; then
  shift
  PY=.venv/bin/python
  args+=(--cpu)
else
  PY=python3
  [[ -d .gpu-wheels ]] || { echo "no .gpu-wheels/: run scripts/gpu/prepare.sh first and carry it" >&2; exit 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sie-site .gpu-wheels/*.whl
  export PYTHONPATH="/tmp/sie-site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/sie-site/bin:$PATH"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
"$PY" -c "import sie, starlette, hypercorn, posix_ipc, msgspec, torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
set -o pipefail
if [[ "${1:-}" == "--diagnose" ]]; then
  shift
  exec "$PY" scripts/gpu/diagnose.py --out "$OUT" "${args[@]}" "$@"
fi
"$PY" scripts/gpu/bench_gpu.py --out "$OUT/gpu-kit.json" "${args[@]}" "$@" 2>&1 | tee "$OUT/gpu-kit.log"
